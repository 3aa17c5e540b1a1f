"""What Envoy receives over gRPC: CheckResponse messages for an allow or a denial (upb protobuf
classes). The denial's parts (`DENIAL_HEADERS`, `denial_headers`, `denial_body`) and the headers
an allow removes are shared with the HTTP transport (`http_transport.py`).

Allow (`OkHttpResponse`): set `x-orrery-principal` (and `x-orrery-trace-link` when the client
sent a valid `traceparent`) with overwrite semantics spelled out twice — `append=false` *and*
`append_action=OVERWRITE_IF_EXISTS_OR_ADD` — because Envoy versions have disagreed about what an
unset `append` means (envoy#43310: 1.37 briefly appended, letting a client copy through). Remove
`authorization` (the adapter never sees credentials) and `traceparent`/`tracestate` (an inbound
trace becomes a span link, not a parent), and `x-orrery-trace-link` when authz sets none.

Denial (`DeniedHttpResponse`): the status, `content-type: application/json`, `cache-control:
no-store`, RFC 6750 `WWW-Authenticate` on 401 (and on 403 `insufficient_scope`), `Retry-After`
plus the IETF `RateLimit-Policy`/`RateLimit` fields on 429 `rate_limited`, `Retry-After` on the
signature-check bounds' 429 and 503 (`errors.Throttled`), and the body
`{"error": reason, "error_description": description}`. A denial is a normal response with a
non-OK `status`; only a bug becomes a gRPC error (Envoy then fails closed with 503).
"""

from __future__ import annotations

import functools
import json

from envoy.config.core.v3.base_pb2 import HeaderValue, HeaderValueOption
from envoy.service.auth.v3.external_auth_pb2 import (
    CheckResponse,
    DeniedHttpResponse,
    OkHttpResponse,
)
from envoy.type.v3.http_status_pb2 import HttpStatus
from google.rpc import code_pb2
from google.rpc.status_pb2 import Status

from authz.errors import (
    Denial,
    InsufficientScope,
    InvalidRequest,
    MissingCredential,
    RateLimited,
    Throttled,
    Unauthenticated,
)
from contract.headers import (
    BEARER_CHALLENGE,
    PRINCIPAL_HEADER,
    TRACE_LINK_HEADER,
    TRACEPARENT_HEADER,
)

REMOVED_HEADERS = ("authorization", TRACEPARENT_HEADER, "tracestate")

_OVERWRITE = HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD
_NO_APPEND = {"value": False}  # google.protobuf.BoolValue, present and false
# The gRPC code is informational for Envoy (any non-OK with a denied_response is a denial, the
# HTTP status comes from the denied_response); it shows up in Envoy's access logs.
_GRPC_CODES = {
    400: code_pb2.INVALID_ARGUMENT,
    401: code_pb2.UNAUTHENTICATED,
    429: code_pb2.RESOURCE_EXHAUSTED,
    503: code_pb2.UNAVAILABLE,
}


def _header(key: str, value: str) -> HeaderValueOption:
    return HeaderValueOption(
        header=HeaderValue(key=key, value=value), append=_NO_APPEND, append_action=_OVERWRITE
    )


def _allow_template(*header_names: str, remove: tuple[str, ...]) -> CheckResponse:
    return CheckResponse(
        status=Status(code=code_pb2.OK),
        ok_response=OkHttpResponse(
            headers=[_header(name, "") for name in header_names],
            headers_to_remove=remove,
        ),
    )


# Built once; `allowed` copies one and fills in the values (about 7x cheaper than building the
# nested messages from keyword arguments on every Check). Without a link, a client's
# x-orrery-trace-link is removed too: our Envoy strips it before routing, Istio's sidecar does not.
_ALLOW = _allow_template(PRINCIPAL_HEADER, remove=(*REMOVED_HEADERS, TRACE_LINK_HEADER))
_ALLOW_WITH_LINK = _allow_template(PRINCIPAL_HEADER, TRACE_LINK_HEADER, remove=REMOVED_HEADERS)


def allowed(assertion: str, trace_link: str | None) -> CheckResponse:
    response = CheckResponse()
    response.CopyFrom(_ALLOW if trace_link is None else _ALLOW_WITH_LINK)
    headers = response.ok_response.headers
    headers[0].header.value = assertion
    if trace_link is not None:
        headers[1].header.value = trace_link
    return response


def allowed_wire(assertion: str, trace_link: str | None) -> bytes:
    """`allowed(assertion, trace_link).SerializeToString()`, without building the message.

    The gRPC transport answers with these bytes (`service.py`). Only the two values change from
    one allow to the next, and the lengths around them depend only on the values' lengths, so
    the bytes before, between and after the values are cut once per length out of the message
    itself, serialised with placeholders (`_allow_frame`): the same bytes by construction.
    """
    link = b"" if trace_link is None else trace_link.encode()
    before, between, after = _allow_frame(len(assertion), None if trace_link is None else len(link))
    return b"".join((before, assertion.encode(), between, link, after))


@functools.lru_cache(maxsize=64)
def _allow_frame(assertion_length: int, link_length: int | None) -> tuple[bytes, bytes, bytes]:
    """The serialised allow around its values, for values of these lengths (an assertion's
    length varies little: its request id and times have fixed widths)."""
    value, link = b"A" * assertion_length, b"B" * (link_length or 0)
    wire = allowed(value.decode(), None if link_length is None else link.decode())
    data = wire.SerializeToString()
    if data.count(value) != 1 or (link and data.count(link) != 1):
        raise RuntimeError("the allow template's placeholders are not unique")
    start = data.index(value)
    end = start + len(value)
    if link_length is None:
        return data[:start], b"", data[end:]
    link_start = data.index(link, end)
    return data[:start], data[end:link_start], data[link_start + len(link) :]


def denied(denial: Denial) -> CheckResponse:
    return _denied(denial.status, denial.reason, denial.description, tuple(denial_headers(denial)))


def denied_wire(denial: Denial) -> bytes:
    """`denied(denial).SerializeToString()`, serialised once per distinct denial."""
    return _denied_wire(
        denial.status, denial.reason, denial.description, tuple(denial_headers(denial))
    )


@functools.lru_cache(maxsize=256)
def _denied_wire(
    status: int, reason: str, description: str, extra: tuple[tuple[str, str], ...]
) -> bytes:
    return bytes(_denied(status, reason, description, extra).SerializeToString())


@functools.lru_cache(maxsize=256)
def _denied(
    status: int, reason: str, description: str, extra: tuple[tuple[str, str], ...]
) -> CheckResponse:
    """A denial is fully determined by these values (descriptions are our literals), so the
    message is built once per distinct denial; it is shared and never modified afterwards —
    gRPC only serializes it."""
    headers = [_header(name, value) for name, value in (*DENIAL_HEADERS, *extra)]
    return CheckResponse(
        status=Status(code=_GRPC_CODES.get(status, code_pb2.PERMISSION_DENIED)),
        denied_response=DeniedHttpResponse(
            status=HttpStatus(code=status),
            headers=headers,
            body=denial_body(reason, description),
        ),
    )


# What every denial carries, on either transport, before `denial_headers`.
DENIAL_HEADERS = (("content-type", "application/json"), ("cache-control", "no-store"))


def denial_body(reason: str, description: str) -> str:
    """The JSON body of a denial, the same bytes on either transport."""
    return json.dumps({"error": reason, "error_description": description})


def denial_headers(denial: Denial) -> list[tuple[str, str]]:
    """The headers a denial adds beyond `DENIAL_HEADERS` (both transports)."""
    if isinstance(denial, MissingCredential):
        return [("www-authenticate", BEARER_CHALLENGE)]
    if isinstance(denial, InvalidRequest):
        return [("www-authenticate", _challenge("invalid_request", denial.description))]
    if isinstance(denial, Unauthenticated):
        return [("www-authenticate", _challenge("invalid_token", denial.description))]
    if isinstance(denial, InsufficientScope):
        return [("www-authenticate", _challenge("insufficient_scope", denial.description))]
    if isinstance(denial, Throttled):
        retry = [("retry-after", str(denial.retry_after))]
        if isinstance(denial, RateLimited):
            retry.append(("ratelimit-policy", denial.policy))
            retry.append(("ratelimit", f'"subject";r={denial.remaining};t={denial.retry_after}'))
        return retry
    return []


def _challenge(error: str, description: str) -> str:
    # Descriptions are our own literals (see authz.errors); quotes and backslashes cannot occur.
    return f'{BEARER_CHALLENGE}, error="{error}", error_description="{description}"'
