"""The A2A 1.0 JSON-RPC envelope: parsing a request and writing its responses, no HTTP in it.

A request body becomes a `Request` (its id, a known method, and params parsed into the method's
protobuf request) or an A2A error, in the order the dispatcher documents: UTF-8 JSON (-32700) →
one JSON-RPC 2.0 request object (no batches, `id` a string, integer or null; -32600) → a
notification (no `id`: `Notification`, answered with nothing) → a known method (-32601) →
`A2A-Version` (-32009) → push methods (-32003) → params (-32602). Once the id is known, an error
is raised as `RpcError`, so its answer carries that id.

JSON on the wire is UTF-8 (RFC 8259 §8.1): a body in any other encoding is a parse error, never
decoded by guesswork (the standard library's `json.loads` on bytes would detect UTF-16 and 32); a
UTF-8 byte order mark, which a sender MUST NOT add and a parser MAY ignore, is ignored.

A request without `id` is a notification (JSON-RPC 2.0 §4.1: "The Server MUST NOT reply to a
Notification"). Every A2A method is a request whose answer the caller needs (A2A §9.3), so a
notification runs nothing, whatever method it names.

Params are lenient (camelCase or snake_case, unknown fields ignored). Every error body carries
`error.data` = `[google.rpc.ErrorInfo, …]` with a string-only `metadata` map.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from a2a.types import a2a_pb2 as pb
from a2a.utils import proto_utils
from a2a.utils.error_handlers import build_error_details
from a2a.utils.errors import (
    JSON_RPC_ERROR_CODE_MAP,
    A2AError,
    InvalidParamsError,
    InvalidRequestError,
    JSONParseError,
    MethodNotFoundError,
    PushNotificationNotSupportedError,
    TaskNotFoundError,
    VersionNotSupportedError,
)
from google.protobuf.json_format import MessageToDict, ParseDict, ParseError
from google.protobuf.message import Message as ProtoMessage

JSON = "application/json"
SUPPORTED_VERSION = (1, 0)
VERSION_HEADER = "A2A-Version"  # also accepted as a query parameter of that name
STREAMING = frozenset({"SendStreamingMessage", "SubscribeToTask"})
TURNS = frozenset({"SendMessage", "SendStreamingMessage"})
PUSH_METHODS = frozenset(
    {
        "CreateTaskPushNotificationConfig",
        "GetTaskPushNotificationConfig",
        "ListTaskPushNotificationConfigs",
        "DeleteTaskPushNotificationConfig",
    }
)
PARAMS: dict[str, type[ProtoMessage]] = {
    "SendMessage": pb.SendMessageRequest,
    "SendStreamingMessage": pb.SendMessageRequest,
    "GetTask": pb.GetTaskRequest,
    "ListTasks": pb.ListTasksRequest,
    "CancelTask": pb.CancelTaskRequest,
    "SubscribeToTask": pb.SubscribeToTaskRequest,
    "GetExtendedAgentCard": pb.GetExtendedAgentCardRequest,
    **dict.fromkeys(PUSH_METHODS, pb.GetTaskRequest),  # never parsed: answered -32003
}

RpcId = str | int | None


@dataclass(frozen=True, slots=True)
class Request:
    """One JSON-RPC request: its id, a known method, and the method's parsed protobuf params."""

    rpc_id: RpcId
    method: str
    params: Any


class Notification(Exception):
    """A request object without `id`: JSON-RPC 2.0 §4.1 forbids any reply, so nothing runs."""

    def __init__(self, method: str) -> None:
        super().__init__(method)
        self.method = method


class RpcError(Exception):
    """An A2A error that answers a request whose id is already known."""

    def __init__(self, rpc_id: RpcId, error: A2AError) -> None:
        super().__init__(error.message)
        self.rpc_id = rpc_id
        self.error = error


@contextmanager
def answering(rpc_id: RpcId) -> Iterator[None]:
    """Raise any A2A error from the block as an `RpcError` for `rpc_id`."""
    try:
        yield
    except A2AError as error:
        raise RpcError(rpc_id, error) from None


def parse_request(body: bytes, version: str) -> Request:
    """The request in `body`, refused in the module docstring's order; `version` is the value of
    `A2A-Version` (header or query parameter, "" when absent)."""
    rpc_id, method, raw_params = _envelope(body)
    with answering(rpc_id):
        if method not in PARAMS:
            raise MethodNotFoundError()
        check_version(version)
        if method in PUSH_METHODS:
            raise PushNotificationNotSupportedError()
        return Request(rpc_id, method, parse_params(method, raw_params))


def loads_utf8(body: bytes) -> Any:
    """The JSON value of a UTF-8 body (a leading byte order mark ignored); raises ValueError for
    any other encoding or invalid JSON, RecursionError for nesting past the parser's stack."""
    if body.startswith(codecs.BOM_UTF8):
        body = body[len(codecs.BOM_UTF8) :]
    return json.loads(body.decode("utf-8"))  # strict: UnicodeDecodeError is a ValueError


def _envelope(body: bytes) -> tuple[RpcId, str, Any]:
    try:
        value = loads_utf8(body)
    except (ValueError, RecursionError):  # RecursionError: nesting deeper than the parser's stack
        raise JSONParseError(message="the body is not JSON in UTF-8 (RFC 8259)") from None
    if isinstance(value, list):
        raise InvalidRequestError(message="batch requests are not supported")
    if not isinstance(value, dict) or value.get("jsonrpc") != "2.0":
        raise InvalidRequestError(message="expected a JSON-RPC 2.0 request object")
    rpc_id = value.get("id")
    if isinstance(rpc_id, bool) or not isinstance(rpc_id, str | int | None):
        raise InvalidRequestError(message="id must be a string, an integer or null")
    method = value.get("method")
    if not isinstance(method, str) or not method:
        raise RpcError(rpc_id, InvalidRequestError(message="method is required"))
    if "id" not in value:
        raise Notification(method)
    return rpc_id, method, value.get("params", {})


def parse_version(value: str) -> tuple[int, int] | None:
    """`Major.Minor` of an `A2A-Version` value (a patch part is ignored); None when malformed."""
    parts = value.strip().split(".")
    if len(parts) not in (2, 3) or not all(p.isdigit() and len(p) <= 4 for p in parts):
        return None
    return int(parts[0]), int(parts[1])


def check_version(value: str) -> None:
    """Refuse anything but 1.0; absent or empty means 0.3 (spec 3.6.2), which is refused too."""
    if parse_version(value) != SUPPORTED_VERSION:
        raise VersionNotSupportedError(
            message="this server speaks A2A 1.0 only; send the header A2A-Version: 1.0"
        )


def parse_params(method: str, raw: Any) -> Any:
    """The method's protobuf request from its JSON params (camelCase or snake_case, unknown fields
    ignored); -32602 for anything else."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise InvalidParamsError(message="params must be an object")
    try:
        return ParseDict(raw, PARAMS[method](), ignore_unknown_fields=True)
    except (ParseError, RecursionError) as exc:
        raise InvalidParamsError(data={"parseError": str(exc)[:200]}) from None


def dumps(value: Any) -> bytes:
    """Compact UTF-8 JSON, as every body and SSE event is written."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def success(rpc_id: RpcId, result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rpc_id, "result": result}


def result_of(method: str, value: Any) -> Any:
    """The JSON `result` of a unary method's handler value."""
    if method == "SendMessage":
        key = "task" if isinstance(value, pb.Task) else "message"
        return {key: MessageToDict(value)}
    if method == "ListTasks":
        return {
            "tasks": [MessageToDict(task) for task in value.tasks],
            "nextPageToken": value.next_page_token,
            "pageSize": value.page_size,
            "totalSize": value.total_size,
        }
    if value is None:  # GetTask / CancelTask of a task that is not the caller's
        raise TaskNotFoundError()
    return MessageToDict(value)


def stream_result(event: Any) -> Any:
    """The JSON `result` of one stream event (a `StreamResponse`)."""
    return MessageToDict(proto_utils.to_stream_response(event))


def task_result(task: pb.Task) -> Any:
    return {"task": MessageToDict(task)}


def error_body(rpc_id: RpcId, error: A2AError) -> dict[str, Any]:
    """A JSON-RPC error response with the spec code and `[ErrorInfo]` data.

    `ErrorInfo.metadata` is `map<string, string>`; the SDK copies its field-validation list into
    it as well as into a `google.rpc.BadRequest` detail, so the list is dropped from the metadata
    (BadRequest keeps it) and any other non-string value is JSON-encoded.
    """
    details = error_details(error)
    return {
        "jsonrpc": "2.0",
        "id": rpc_id,
        "error": {
            "code": JSON_RPC_ERROR_CODE_MAP.get(type(error), -32603),
            "message": error.message,
            "data": details,
        },
    }


def error_details(error: A2AError) -> list[dict[str, Any]]:
    """The error's `details`: its `google.rpc.ErrorInfo` first, with a string-only `metadata`
    (see `error_body`), then any `google.rpc.BadRequest` the SDK adds."""
    details = _details(error)
    info = details[0]
    info["metadata"] = {
        key: value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
        for key, value in info["metadata"].items()
        if not (key == "errors" and len(details) > 1)
    }
    return details


def error_reason(error: A2AError) -> str:
    """The error's stable `ErrorInfo.reason` (also the outcome in logs and metrics)."""
    return str(_details(error)[0]["reason"])


# JSON-RPC's parse error has no reason in the a2a-sdk's mapping (it would say `UNKNOWN_ERROR`):
# give it one of its own, the same in the body, the log event and the metrics.
PARSE_ERROR = "PARSE_ERROR"


def _details(error: A2AError) -> list[dict[str, Any]]:
    details = build_error_details(error)
    if isinstance(error, JSONParseError):
        details[0]["reason"] = PARSE_ERROR
    return details
