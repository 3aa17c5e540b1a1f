"""Orrery A2A edge: the authz → adapter wire contract (the only code both services share).

authz and the adapter are separate services that meet at one signed header. What both sides must
agree on lives here and nowhere else: the principal and its key, the header names, the assertion
codec and its errors, the bearer realm and the trace-link rule. This package imports nothing of
ours and only the standard library, so a change to either service cannot change the contract
by accident, and a reviewer can see the whole of it in one place. Its prose is docs/contract.md.
"""
