"""What a protocol binding of A2A 1.0 is to the dispatcher: how a request is read, and how every
answer to it is written.

The adapter speaks two bindings on one a2a-sdk request handler: JSON-RPC (`jsonrpc.py`, `POST
/a2a`) and HTTP+JSON (`rest.py`, `/a2a/message:send`, `/a2a/tasks/…`). Everything between reading
and writing — the principal, the body cap, message rules, token expiry, the per-principal caps,
the handler, retries, streams — is the dispatcher's (`dispatch.py`) and the same for both, so a
rule holds on one binding exactly when it holds on the other.
"""

from __future__ import annotations

from typing import Any, Protocol

from a2a.utils.errors import A2AError
from aiohttp import web

from adapter.envelope import Request, RpcId
from adapter.errors import Refusal

Body = tuple[int, Any]  # an HTTP status and the JSON body to send with it


class Binding(Protocol):
    """One A2A protocol binding: its request reader and its answer shapes."""

    @property
    def name(self) -> str:
        """The binding's name in logs and spans (`rpc.system`): `jsonrpc` or `http_json`."""
        ...

    def read(self, http: web.Request, body: bytes) -> Request:
        """The A2A call in `http` (its body already read under the cap); raises the A2A error that
        refuses it (`RpcError` once a JSON-RPC id is known, `Notification` for one)."""
        ...

    def answer(self, request: Request, value: Any) -> Body:
        """A unary method's success: the SDK handler's value in the binding's shape."""
        ...

    def event(self, rpc_id: RpcId, result: Any) -> Any:
        """One stream event's `data` for a `StreamResponse` in JSON form."""
        ...

    def error(self, rpc_id: RpcId, error: A2AError) -> Body:
        """An A2A error in the binding's shape (also a stream's `event: error` data)."""
        ...

    def edge_error(
        self, rpc_id: RpcId, reason: str, message: str, metadata: dict[str, str], status: int
    ) -> Body:
        """An error of the edge's own (`ErrorInfo` domain `orrery-a2a`, `reason` its stable code)
        that would be HTTP `status`: a stream's end on an expired token or a store outage."""
        ...

    def refusal(self, refusal: Refusal) -> web.Response:
        """An HTTP-level refusal (401, 413, 429, 503) as this binding answers it."""
        ...
