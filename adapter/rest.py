"""The A2A 1.0 HTTP+JSON binding (spec §11) under `/a2a`: a `bindings.Binding` on aiohttp.

The interface's URL is the JSON-RPC one (`ORRERY_A2A_PUBLIC_URL`, `…/a2a`), and the binding's
paths hang below it:

    POST /a2a/message:send                 SendMessage
    POST /a2a/message:stream               SendStreamingMessage (SSE)
    GET  /a2a/tasks/{id}                   GetTask (`historyLength` in the query)
    GET  /a2a/tasks                        ListTasks (its fields as camelCase query parameters)
    POST /a2a/tasks/{id}:cancel            CancelTask
    POST /a2a/tasks/{id}:subscribe         SubscribeToTask (SSE)
    GET  /a2a/extendedAgentCard            GetExtendedAgentCard
    /a2a/tasks/{id}/pushNotificationConfigs[/{configId}]   push is off: PushNotificationNotSupported

A call is refused cheapest first, in this binding's shapes: an unknown route → 404
`METHOD_NOT_FOUND`; `A2A-Version` (header or query parameter) other than 1.0 → 400
`VERSION_NOT_SUPPORTED`; push routes → 400 `PUSH_NOTIFICATION_NOT_SUPPORTED`; a body whose
`Content-Type` is not `application/json` (or `application/a2a+json`) → 415
`CONTENT_TYPE_NOT_SUPPORTED`; a body that is not UTF-8 JSON → 400 `PARSE_ERROR`; params of the
wrong shape → 400 `INVALID_PARAMS`. Every error is the HTTP status and `google.rpc.Code` of the
spec's table (§5.4; where the a2a-sdk's own `A2A_ERROR_MAPPING` differs — 409 for
`TaskNotCancelable`, 415 for `ContentTypeNotSupported`, 502 for `InvalidAgentResponse`,
`UNIMPLEMENTED` for push, unsupported operations and versions — the spec wins; the SDK's for the
JSON-RPC errors the table leaves out), with a `google.rpc.Status`-style body (AIP-193):
`{"error": {code, status, message, details: [google.rpc.ErrorInfo, …]}}` — never a stack trace.
The edge's own
refusals keep their HTTP status: a cap (429, or 503 for a full task store) is a `google.rpc.Status`
with an `orrery-a2a` `ErrorInfo` and `Retry-After`; 401, 413 and the other 503s are the edge's
`{"error", "error_description"}` (what Envoy and authz answer on every route).

Query parameters are read with the a2a-sdk's own rules (`proto_utils.parse_params`: camelCase
names, `true`/`false`, repeated or comma-separated lists); bodies with the same lenient parser
as JSON-RPC params (`envelope.parse_params`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from a2a.types import a2a_pb2 as pb
from a2a.utils import proto_utils
from a2a.utils.errors import (
    A2A_ERROR_MAPPING,
    A2AError,
    ContentTypeNotSupportedError,
    ErrorMapping,
    ExtendedAgentCardNotConfiguredError,
    ExtensionSupportRequiredError,
    InvalidAgentResponseError,
    InvalidParamsError,
    InvalidRequestError,
    JSONParseError,
    MethodNotFoundError,
    PushNotificationNotSupportedError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
    VersionNotSupportedError,
)
from aiohttp import web
from google.protobuf.json_format import ParseError
from multidict import MultiMapping

from adapter.bindings import Body
from adapter.envelope import (
    JSON,
    PARSE_ERROR,
    VERSION_HEADER,
    Request,
    RpcId,
    check_version,
    error_details,
    loads_utf8,
    parse_params,
    result_of,
)
from adapter.errors import OverCap, Refusal
from adapter.responses import orrery_error_info, refusal_response

PREFIX = "/a2a"  # the interface's URL path; every route of the binding is below it
A2A_JSON = "application/a2a+json"  # the A2A media type, accepted like application/json
_PUSH = "push"  # the push-notification routes: one answer for all of them
_ID = r"(?P<id>[^/:]+)"


def _mapping(http: int, code: str, error: type[A2AError]) -> ErrorMapping:
    return ErrorMapping(http, code, A2A_ERROR_MAPPING[error].reason)


# A2A 1.0 §5.4: the HTTP status and gRPC code of each A2A error; then the SDK's mapping of the
# JSON-RPC errors the table leaves out, and the parse error, which the SDK does not map.
MAPPINGS: dict[type[A2AError], ErrorMapping] = {
    **A2A_ERROR_MAPPING,
    TaskNotFoundError: _mapping(404, "NOT_FOUND", TaskNotFoundError),
    TaskNotCancelableError: _mapping(409, "FAILED_PRECONDITION", TaskNotCancelableError),
    PushNotificationNotSupportedError: _mapping(
        400, "UNIMPLEMENTED", PushNotificationNotSupportedError
    ),
    UnsupportedOperationError: _mapping(400, "UNIMPLEMENTED", UnsupportedOperationError),
    ContentTypeNotSupportedError: _mapping(415, "INVALID_ARGUMENT", ContentTypeNotSupportedError),
    InvalidAgentResponseError: _mapping(502, "INTERNAL", InvalidAgentResponseError),
    ExtendedAgentCardNotConfiguredError: _mapping(
        400, "FAILED_PRECONDITION", ExtendedAgentCardNotConfiguredError
    ),
    ExtensionSupportRequiredError: _mapping(
        400, "FAILED_PRECONDITION", ExtensionSupportRequiredError
    ),
    VersionNotSupportedError: _mapping(400, "UNIMPLEMENTED", VersionNotSupportedError),
    JSONParseError: ErrorMapping(400, "INVALID_ARGUMENT", PARSE_ERROR),
}
_INTERNAL = ErrorMapping(500, "INTERNAL", "INTERNAL_ERROR")
# The google.rpc.Code name of each HTTP status the edge answers with one of its own errors.
_CODES = {401: "UNAUTHENTICATED", 429: "RESOURCE_EXHAUSTED", 503: "UNAVAILABLE"}


@dataclass(frozen=True, slots=True)
class Route:
    methods: frozenset[str]
    path: re.Pattern[str]
    operation: str  # the A2A method (as in JSON-RPC), or `_PUSH`


def _route(methods: Iterable[str], path: str, operation: str) -> Route:
    return Route(frozenset(methods), re.compile(path), operation)


ROUTES: tuple[Route, ...] = (
    _route(["POST"], r"/message:send", "SendMessage"),
    _route(["POST"], r"/message:stream", "SendStreamingMessage"),
    _route(["GET"], r"/tasks", "ListTasks"),
    _route(["GET"], rf"/tasks/{_ID}", "GetTask"),
    _route(["POST"], rf"/tasks/{_ID}:cancel", "CancelTask"),
    _route(["POST"], rf"/tasks/{_ID}:subscribe", "SubscribeToTask"),
    _route(["GET"], r"/extendedAgentCard", "GetExtendedAgentCard"),
    _route(["GET", "POST", "DELETE"], rf"/tasks/{_ID}/pushNotificationConfigs(?:/[^/]+)?", _PUSH),
)
# Whose params come from the query string (GET), else from the JSON body (POST).
_QUERY = frozenset({"ListTasks", "GetTask"})


class _Query:
    """An aiohttp query as the a2a-sdk's `parse_params` reads a Starlette one."""

    def __init__(self, query: MultiMapping[str]) -> None:
        self._query = query

    def keys(self) -> list[str]:
        return list(dict.fromkeys(self._query.keys()))

    def getlist(self, key: str) -> list[str]:
        return self._query.getall(key, [])


def find(method: str, path: str) -> tuple[Route, dict[str, str]]:
    """The route `method path` (path below `PREFIX`) names and its path parameters; 404
    `METHOD_NOT_FOUND` for anything else."""
    for route in ROUTES:
        match = route.path.fullmatch(path)
        if match is not None and method in route.methods:
            return route, match.groupdict()
    raise MethodNotFoundError(message="no such HTTP+JSON operation")


class RestBinding:
    """HTTP+JSON, as A2A 1.0 §11 binds it (see the module docstring)."""

    name = "http_json"

    def read(self, http: web.Request, body: bytes) -> Request:
        route, path_params = find(http.method, http.path.removeprefix(PREFIX))
        check_version(http.headers.get(VERSION_HEADER) or http.query.get(VERSION_HEADER) or "")
        if route.operation == _PUSH:
            raise PushNotificationNotSupportedError()
        method = route.operation
        if method in _QUERY:
            params = _from_query(method, http.query)
        else:
            params = parse_params(method, _json_body(http, body))
        if "id" in path_params:
            params.id = path_params["id"]
        return Request(None, method, params)

    def answer(self, request: Request, value: Any) -> Body:
        return 200, result_of(request.method, value)

    def event(self, rpc_id: RpcId, result: Any) -> Any:
        return result

    def error(self, rpc_id: RpcId, error: A2AError) -> Body:
        mapping = MAPPINGS.get(type(error), _INTERNAL)
        return mapping.http_code, _status(
            mapping.http_code, mapping.grpc_status, error.message, error_details(error)
        )

    def edge_error(
        self, rpc_id: RpcId, reason: str, message: str, metadata: dict[str, str], status: int
    ) -> Body:
        details = [orrery_error_info(reason, metadata)]
        return status, _status(status, _CODES.get(status, "UNKNOWN"), message, details)

    def refusal(self, refusal: Refusal) -> web.Response:
        if not isinstance(refusal, OverCap):
            return refusal_response(refusal)
        metadata = {"limit": str(refusal.limit), "retry_after": str(refusal.retry_after)}
        status, body = self.edge_error(
            None, refusal.reason.upper(), refusal.description, metadata, refusal.status
        )
        return web.json_response(
            body, status=status, headers={"Retry-After": str(refusal.retry_after)}
        )


def _status(code: int, status: str, message: str, details: list[dict[str, Any]]) -> Any:
    return {"error": {"code": code, "status": status, "message": message, "details": details}}


def _json_body(http: web.Request, body: bytes) -> Any:
    """The JSON object in a POST body; none (CancelTask, SubscribeToTask) is an empty object."""
    if not body:
        return {}
    if http.content_type not in (JSON, A2A_JSON):
        raise ContentTypeNotSupportedError(message="send Content-Type: application/json")
    try:
        value = loads_utf8(body)
    except (ValueError, RecursionError):
        raise JSONParseError(message="the body is not JSON in UTF-8 (RFC 8259)") from None
    if not isinstance(value, dict):
        raise InvalidRequestError(message="the body must be a JSON object")
    return value


def _from_query(method: str, query: MultiMapping[str]) -> Any:
    params = pb.ListTasksRequest() if method == "ListTasks" else pb.GetTaskRequest()
    try:
        # typed for Starlette's QueryParams; it reads only keys() and getlist()
        proto_utils.parse_params(_Query(query), params)  # type: ignore[arg-type]
    except (ParseError, ValueError) as exc:
        raise InvalidParamsError(data={"parseError": str(exc)[:200]}) from None
    return params
