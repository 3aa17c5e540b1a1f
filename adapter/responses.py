"""HTTP answers for refusals that happen before (or outside) JSON-RPC processing.

* 401: `{"error": "<reason>", "error_description": "…"}` with `WWW-Authenticate: Bearer
  realm="orrery-a2a"` (docs/contract.md#headers), for a missing/invalid assertion on any surface;
* 429 (a per-principal cap: turns in flight, open subscriptions): `Retry-After` and a JSON-RPC
  error body (docs/contract.md#turns-in-flight), id null because the body was not read, code
  -32000 (JSON-RPC's implementation-defined server-error range, outside A2A's -32001…-32009),
  `ErrorInfo{reason: TOO_MANY_IN_FLIGHT | TOO_MANY_SUBSCRIPTIONS, domain: orrery-a2a}`;
* 503 (`limiter_unavailable`, `store_unavailable`): `Retry-After` and `{"error",
  "error_description"}`;
* anything else (413): `{"error", "error_description"}`.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from adapter.errors import OverCap, Refusal, Unauthenticated, Unavailable
from contract.headers import BEARER_CHALLENGE

ORRERY_DOMAIN = "orrery-a2a"
# JSON-RPC's implementation-defined server-error code that A2A (-32001…-32099) leaves us.
ORRERY_CODE = -32000


def orrery_error_body(
    rpc_id: str | int | None, reason: str, message: str, metadata: dict[str, str]
) -> dict[str, Any]:
    """A JSON-RPC error of the edge's own (not one of A2A's): code -32000, `ErrorInfo` in the
    `orrery-a2a` domain with `reason` as its stable code."""
    return {
        "jsonrpc": "2.0",
        "id": rpc_id,
        "error": {
            "code": ORRERY_CODE,
            "message": message,
            "data": [orrery_error_info(reason, metadata)],
        },
    }


def orrery_error_info(reason: str, metadata: dict[str, str]) -> dict[str, Any]:
    """A `google.rpc.ErrorInfo` of the edge's own: domain `orrery-a2a`, `reason` its stable code."""
    return {
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": reason,
        "domain": ORRERY_DOMAIN,
        "metadata": metadata,
    }


def over_cap_body(refusal: OverCap) -> dict[str, Any]:
    """The 429 body: a JSON-RPC error (id null: the body was not read) with ErrorInfo."""
    metadata = {"limit": str(refusal.limit), "retry_after": str(refusal.retry_after)}
    return orrery_error_body(None, refusal.reason.upper(), refusal.description, metadata)


def refusal_response(refusal: Refusal) -> web.Response:
    """HTTP-level refusals: 401 with a Bearer challenge, 429 with Retry-After, others as JSON."""
    headers: dict[str, str] = {}
    if isinstance(refusal, OverCap):
        headers["Retry-After"] = str(refusal.retry_after)
        body: dict[str, Any] = over_cap_body(refusal)
    else:
        body = {"error": refusal.reason, "error_description": refusal.description}
        if isinstance(refusal, Unavailable):
            headers["Retry-After"] = str(refusal.retry_after)
        if isinstance(refusal, Unauthenticated):
            headers["WWW-Authenticate"] = BEARER_CHALLENGE
    return web.Response(
        body=json.dumps(body, separators=(",", ":")).encode(),
        status=refusal.status,
        content_type="application/json",
        headers=headers,
    )
