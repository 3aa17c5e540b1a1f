"""The gRPC transport: CheckRequest → `CheckView` → `Checker` → CheckResponse.

The decision, its metrics and its log event are transport-free (`checking.py`); this module only
translates. A bug inside the decision surfaces as a gRPC INTERNAL error, which Envoy turns into
its configured fail-closed status (503).

Check answers with the serialised CheckResponse (`responses.allowed_wire` / `denied_wire`: the
same bytes as the message's `SerializeToString`), registered without a response serialiser, so
no message is built or serialised per Check.
"""

from __future__ import annotations

import functools
from typing import Any

import grpc
from envoy.service.auth.v3.external_auth_pb2 import CheckRequest

from authz import responses
from authz.checking import Checker, Pending
from authz.decision import Allow, CheckView

SERVICE_NAME = "envoy.service.auth.v3.Authorization"


def check_view(request: CheckRequest) -> CheckView:
    """The parts of an Envoy CheckRequest the decision reads.

    Envoy sends headers in `headers` (a map, repeated values comma-joined) or, with
    `encode_raw_headers`, in `header_map` (one entry per value); both become one mapping with
    repeated values joined by "," so the checks treat them the same way.
    """
    http = request.attributes.request.http
    headers: Any = http.headers
    if not headers and len(http.header_map.headers):
        joined: dict[str, str] = {}
        for entry in http.header_map.headers:
            name = entry.key.lower()
            value = entry.raw_value.decode("utf-8", "replace") if entry.raw_value else entry.value
            joined[name] = f"{joined[name]},{value}" if name in joined else value
        headers = joined
    extensions = request.attributes.context_extensions
    return CheckView(
        headers=headers,
        surface=extensions.get("surface"),
        path=http.path,
        peer=functools.partial(_source_address, request),
    )


def _source_address(request: CheckRequest) -> str:
    """The address of the client as the proxy that asks saw it (its downstream peer, or what
    the PROXY protocol said); read only when a signature is to be checked."""
    return str(request.attributes.source.address.socket_address.address)


class AuthorizationService:
    """`envoy.service.auth.v3.Authorization` on grpc.aio (`add_to`)."""

    def __init__(self, checker: Checker) -> None:
        self._checker = checker

    def add_to(self, server: grpc.aio.Server) -> None:
        check = grpc.unary_unary_rpc_method_handler(
            self.Check, request_deserializer=CheckRequest.FromString
        )
        handler = grpc.method_handlers_generic_handler(SERVICE_NAME, {"Check": check})
        server.add_generic_rpc_handlers((handler,))

    # N802: the gRPC method's name is fixed by the service definition
    async def Check(self, request: CheckRequest, context: Any) -> bytes:  # noqa: N802
        # `begin` first: a cached Check is decided without awaiting another coroutine.
        result = self._checker.begin(check_view(request))
        if isinstance(result, Pending):
            result = await self._checker.finish(result)
        if isinstance(result, Allow):
            return responses.allowed_wire(result.assertion, result.trace_link)
        return responses.denied_wire(result.denial)
