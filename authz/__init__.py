"""Orrery A2A edge: the ext_authz decision service (the only component that sees credentials)."""
