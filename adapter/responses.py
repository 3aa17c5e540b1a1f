"""HTTP answers for refusals that happen before (or outside) JSON-RPC processing.

* 401: `{"error": "<reason>", "error_description": "…"}` with `WWW-Authenticate: Bearer
  realm="orrery-a2a"` (docs/contract.md#headers), for a missing/invalid assertion on any surface;
* 429 (a per-principal cap: turns in flight, open subscriptions): `Retry-After` and a JSON-RPC
  error body (docs/contract.md#turns-in-flight), id null because the body was not read, code
  -32000 (JSON-RPC's implementation-defined server-error range, outside A2A's -32001…-32009),
  `ErrorInfo{reason: TOO_MANY_IN_FLIGHT | TOO_MANY_SUBSCRIPTIONS, domain: orrery-a2a}`;
* anything else (413, 503): `{"error", "error_description"}`.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from adapter.errors import OverCap, Refusal, Unauthenticated
from contract.headers import BEARER_CHALLENGE

ORRERY_DOMAIN = "orrery-a2a"
OVER_CAP_CODE = -32000


def over_cap_body(refusal: OverCap) -> dict[str, Any]:
    """The 429 body: a JSON-RPC error (id null: the body was not read) with ErrorInfo."""
    return {
        "jsonrpc": "2.0",
        "id": None,
        "error": {
            "code": OVER_CAP_CODE,
            "message": refusal.description,
            "data": [
                {
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": refusal.reason.upper(),
                    "domain": ORRERY_DOMAIN,
                    "metadata": {
                        "limit": str(refusal.limit),
                        "retry_after": str(refusal.retry_after),
                    },
                }
            ],
        },
    }


def refusal_response(refusal: Refusal) -> web.Response:
    """HTTP-level refusals: 401 with a Bearer challenge, 429 with Retry-After, others as JSON."""
    headers: dict[str, str] = {}
    if isinstance(refusal, OverCap):
        headers["Retry-After"] = str(refusal.retry_after)
        body: dict[str, Any] = over_cap_body(refusal)
    else:
        body = {"error": refusal.reason, "error_description": refusal.description}
        if isinstance(refusal, Unauthenticated):
            headers["WWW-Authenticate"] = BEARER_CHALLENGE
    return web.Response(
        body=json.dumps(body, separators=(",", ":")).encode(),
        status=refusal.status,
        content_type="application/json",
        headers=headers,
    )
