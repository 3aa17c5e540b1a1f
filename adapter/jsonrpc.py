"""The A2A 1.0 JSON-RPC binding (`POST /a2a`, `/a2a/`): a `bindings.Binding` over `envelope.py`.

A request is one JSON-RPC 2.0 request object with `Content-Type: application/json` (else -32005);
the envelope refuses the rest in its order. Every answer is HTTP 200 with a JSON-RPC response
carrying the request's id, errors with `error.data` = `[google.rpc.ErrorInfo]`; the edge's own
errors (a token that expired mid-stream, a store outage) are code -32000 in the `orrery-a2a`
domain. HTTP-level refusals keep their HTTP status (`responses.py`).
"""

from __future__ import annotations

from typing import Any

from a2a.utils.errors import A2AError, ContentTypeNotSupportedError
from aiohttp import web

from adapter.bindings import Body
from adapter.envelope import (
    JSON,
    VERSION_HEADER,
    Request,
    RpcId,
    error_body,
    parse_request,
    result_of,
    success,
)
from adapter.errors import Refusal
from adapter.responses import orrery_error_body, refusal_response


class JsonRpcBinding:
    """JSON-RPC 2.0 over HTTP POST, as A2A 1.0 §9 binds it."""

    name = "jsonrpc"

    def read(self, http: web.Request, body: bytes) -> Request:
        if http.content_type != JSON:
            raise ContentTypeNotSupportedError(message="send Content-Type: application/json")
        version = http.headers.get(VERSION_HEADER) or http.query.get(VERSION_HEADER) or ""
        return parse_request(body, version)

    def answer(self, request: Request, value: Any) -> Body:
        return 200, success(request.rpc_id, result_of(request.method, value))

    def event(self, rpc_id: RpcId, result: Any) -> Any:
        return success(rpc_id, result)

    def error(self, rpc_id: RpcId, error: A2AError) -> Body:
        return 200, error_body(rpc_id, error)

    def edge_error(
        self, rpc_id: RpcId, reason: str, message: str, metadata: dict[str, str], status: int
    ) -> Body:
        return 200, orrery_error_body(rpc_id, reason, message, metadata)

    def refusal(self, refusal: Refusal) -> web.Response:
        return refusal_response(refusal)
