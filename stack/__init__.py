"""Orrery A2A edge: the local stack (Envoy, authz, adapter, dev issuer as plain processes)."""
