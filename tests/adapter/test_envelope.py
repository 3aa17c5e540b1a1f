"""The JSON-RPC envelope on its own, without a server: parsing order, versions, bodies."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import (
    A2AError,
    InvalidParamsError,
    JSONParseError,
    MethodNotFoundError,
    PushNotificationNotSupportedError,
    TaskNotFoundError,
    VersionNotSupportedError,
)

from adapter.envelope import (
    RpcError,
    error_body,
    error_reason,
    parse_request,
    parse_version,
    result_of,
)


def body(method: str, params: object = None, rpc_id: object = 7) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": params}).encode()


def refusal(raw: bytes, version: str = "1.0") -> RpcError:
    with pytest.raises(RpcError) as caught:
        parse_request(raw, version)
    return caught.value


@pytest.mark.parametrize(
    ("value", "parsed"), [("1.0", (1, 0)), ("1.0.2", (1, 0)), (" 1.0 ", (1, 0))]
)
def test_a_version_is_major_and_minor(value: str, parsed: tuple[int, int]) -> None:
    """`A2A-Version` is read as Major.Minor; a patch part and surrounding spaces are ignored."""
    assert parse_version(value) == parsed


@pytest.mark.parametrize("value", ["", "1", "latest", "1.0.0.0", "1.x", "12345.0", "-1.0"])
def test_a_malformed_version_is_none(value: str) -> None:
    """Anything but two or three short numbers is no version at all."""
    assert parse_version(value) is None


def test_a_request_parses_into_the_methods_protobuf() -> None:
    """Lenient params: snake_case and unknown members are accepted."""
    request = parse_request(body("GetTask", {"id": "t-1", "history_length": 2, "new": 1}), "1.0")
    assert (request.rpc_id, request.method) == (7, "GetTask")
    assert request.params == pb.GetTaskRequest(id="t-1", history_length=2)


def test_an_unknown_method_is_refused_before_the_version() -> None:
    """-32601 comes before -32009, and answers with the request's id."""
    failed = refusal(body("message/send", rpc_id="abc"), version="")
    assert isinstance(failed.error, MethodNotFoundError)
    assert failed.rpc_id == "abc"


def test_the_version_is_refused_before_push_methods() -> None:
    """A push method without `A2A-Version: 1.0` is -32009, not -32003."""
    failed = refusal(body("GetTaskPushNotificationConfig"), version="0.3")
    assert isinstance(failed.error, VersionNotSupportedError)


def test_push_methods_are_refused_before_their_params() -> None:
    """A push method is -32003 whatever its params."""
    failed = refusal(body("CreateTaskPushNotificationConfig", ["not", "an", "object"]))
    assert isinstance(failed.error, PushNotificationNotSupportedError)


def test_params_that_are_not_an_object_are_invalid() -> None:
    """-32602 for a params array, with the id known."""
    assert isinstance(refusal(body("GetTask", [1])).error, InvalidParamsError)


def test_bad_json_is_refused_without_an_id() -> None:
    """Before the id is known the error is a plain A2A error (answered with id null)."""
    with pytest.raises(JSONParseError):
        parse_request(b'{"jsonrpc": "2.0", "id": 1,', "1.0")


def test_a_parse_error_has_a_reason_of_its_own() -> None:
    """-32700 says `PARSE_ERROR` in its body and as its outcome, not the SDK's `UNKNOWN_ERROR`."""
    error = JSONParseError(message="not JSON")
    assert error_body(None, error)["error"]["data"][0]["reason"] == "PARSE_ERROR"
    assert error_reason(error) == "PARSE_ERROR"


def test_error_metadata_is_a_string_map() -> None:
    """`ErrorInfo.metadata` holds strings only; other values are JSON-encoded."""
    error: A2AError = InvalidParamsError(data={"limit": 4, "rule": "too_long"})
    info = error_body(3, error)["error"]["data"][0]
    assert info["metadata"] == {"limit": "4", "rule": "too_long"}


def test_no_task_is_task_not_found() -> None:
    """GetTask/CancelTask of a task that is not the caller's answers -32001."""
    with pytest.raises(TaskNotFoundError):
        result_of("GetTask", None)


def test_the_envelope_needs_no_http_server() -> None:
    """Importing the envelope loads no aiohttp: it is JSON-RPC only."""
    code = "import sys, adapter.envelope; sys.exit('aiohttp' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
