"""The names both sides of the contract use on the wire, and the bearer realm of every refusal.

Everything under `x-orrery-` is ours: Envoy drops client copies of what authz sets, and authz
refuses any other client-sent name in the namespace except the hop header (which marks a call
made by Orrery itself). The contract: docs/contract.md#headers.
"""

from __future__ import annotations

RESERVED_PREFIX = "x-orrery-"
PRINCIPAL_HEADER = "x-orrery-principal"
"""The signed principal assertion authz sets on an allowed request (see `contract.assertion`)."""
TRACE_LINK_HEADER = "x-orrery-trace-link"
"""The caller's W3C traceparent, moved here by authz: a span link target, never a parent."""
HOP_HEADER = "x-orrery-hop"
"""Set on calls Orrery makes itself; authz refuses them as a loop."""
REQUEST_ID_HEADER = "x-request-id"
"""Envoy's request id; an assertion is bound to it."""
TRACEPARENT_HEADER = "traceparent"

REALM = "orrery-a2a"
"""The `realm` of every `WWW-Authenticate: Bearer` challenge, from authz and from the adapter."""
BEARER_CHALLENGE = f'Bearer realm="{REALM}"'
