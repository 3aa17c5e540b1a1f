"""Orrery A2A edge: the A2A 1.0 JSON-RPC adapter (trusts only the signed principal header)."""
