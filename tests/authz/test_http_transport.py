"""authz's HTTP ext_authz transport, spoken to as Envoy's http_service client speaks to it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from authz.errors import Denial
from authz.http_transport import CHECK_PREFIX, MAX_HEAD_BYTES
from contract.assertion import verify
from contract.http_checks import CARRIERS
from tests.authz.support import Issuer, RunningAuthz, base_env, running_authz
from tests.waiting import eventually

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes


@pytest.fixture
async def authz_http(jwks_file: Path) -> AsyncIterator[RunningAuthz]:
    """authz with its HTTP transport on a free port beside gRPC."""
    env = {**base_env(jwks_file=jwks_file), "ORRERY_A2A_AUTHZ_HTTP_ADDR": "127.0.0.1:0"}
    async with running_authz(env) as running:
        yield running


@contextlib.asynccontextmanager
async def connection(
    authz: RunningAuthz,
) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    assert authz.bound.http is not None
    host, _, port = authz.bound.http.rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        yield reader, writer
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


def check_request(
    path: str = "/a2a",
    headers: dict[str, str] | None = None,
    *,
    token: str | None = None,
    request_id: str = "req-1",
) -> bytes:
    """A check as Envoy sends it: original method, prefixed path, Host, content-length 0."""
    lines = [f"POST {CHECK_PREFIX.decode()}{path} HTTP/1.1", "host: edge.test"]
    lines += [f"x-request-id: {request_id}", "content-length: 0"]
    if token is not None:
        lines.append(f"authorization: Bearer {token}")
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def read_answer(reader: asyncio.StreamReader) -> Answer:
    head = await reader.readuntil(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").rstrip("\r\n").split("\r\n")
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return Answer(int(status_line.split()[1]), headers, body)


async def exchange(authz: RunningAuthz, data: bytes) -> Answer:
    async with connection(authz) as (reader, writer):
        writer.write(data)
        return await read_answer(reader)


async def test_allow_sets_the_assertion_and_names_the_headers_to_remove(
    authz_http: RunningAuthz, issuer: Issuer
) -> None:
    """200 carries x-orrery-principal (verifiable) and the removals Envoy applies upstream."""
    answer = await exchange(authz_http, check_request(token=issuer.token(), request_id="rid-7"))
    assert answer.status == 200
    assert answer.body == b""
    verified = verify(
        authz_http.settings.assertion_keys,
        answer.headers["x-orrery-principal"],
        request_id="rid-7",
        surface="a2a",
        now=int(time.time()),
    )
    assert verified.principal.key == "service:svc-reporter::svc-reporter"
    assert answer.headers["x-envoy-auth-headers-to-remove"] == (
        "authorization,traceparent,tracestate,x-orrery-trace-link"
    )


async def test_allow_with_a_traceparent_sets_the_link_and_keeps_it(
    authz_http: RunningAuthz, issuer: Issuer
) -> None:
    """A valid traceparent becomes x-orrery-trace-link, which is then not removed."""
    request = check_request(headers={"traceparent": TRACEPARENT}, token=issuer.token())
    answer = await exchange(authz_http, request)
    assert answer.headers["x-orrery-trace-link"] == TRACEPARENT[:55]
    assert answer.headers["x-envoy-auth-headers-to-remove"] == (
        "authorization,traceparent,tracestate"
    )


@pytest.mark.parametrize(
    ("path", "headers", "with_token"),
    [
        ("/a2a", {}, False),  # missing_credential
        ("/a2a?access_token=x", {}, True),  # invalid_request
        ("/elsewhere", {}, True),  # forbidden
        ("/a2a", {"x-orrery-principal": "forged"}, True),  # reserved_header
        ("/a2a", {"authorization": "Basic Zm9vOmJhcg=="}, False),  # missing_credential
    ],
)
async def test_a_denial_is_the_grpc_denial_bit_for_bit(
    authz_http: RunningAuthz,
    issuer: Issuer,
    path: str,
    headers: dict[str, str],
    with_token: bool,
) -> None:
    """Status, headers and body of an HTTP denial equal the gRPC DeniedHttpResponse's."""
    token = issuer.token() if with_token else None
    answer = await exchange(authz_http, check_request(path, headers, token=token))
    grpc_headers = {"authorization": f"Bearer {token}"} if token else {}
    response = await authz_http.check({**grpc_headers, **headers}, path=path)
    denied = response.denied_response
    assert answer.status == denied.status.code
    assert answer.body == denied.body.encode()
    expected = {h.header.key: h.header.value for h in denied.headers}
    assert {k: v for k, v in answer.headers.items() if k != "content-length"} == expected


async def test_a_5xx_denial_travels_under_its_carrier_status(
    authz_http: RunningAuthz, issuer: Issuer
) -> None:
    """Envoy reads a 5xx as authz failing, so 508 loop_detected is sent as 468."""
    request = check_request(headers={"x-orrery-hop": "1"}, token=issuer.token())
    answer = await exchange(authz_http, request)
    assert answer.status == CARRIERS[508] == 468
    assert json.loads(answer.body)["error"] == "loop_detected"


def test_every_5xx_denial_has_a_carrier() -> None:
    """A new 5xx denial without a carrier would reach clients as Envoy's edge_error."""

    def subclasses(cls: type[Denial]) -> list[type[Denial]]:
        return [cls, *(s for sub in cls.__subclasses__() for s in subclasses(sub))]

    statuses = {cls.status for cls in subclasses(Denial) if cls.status >= 500}
    assert statuses <= set(CARRIERS)
    assert all(400 <= carrier < 500 for carrier in CARRIERS.values())


async def test_checks_share_a_kept_alive_connection(
    authz_http: RunningAuthz, issuer: Issuer
) -> None:
    """Several checks, one after another and pipelined, on one connection, answered in order."""
    token = issuer.token()
    async with connection(authz_http) as (reader, writer):
        writer.write(check_request(token=token))
        assert (await read_answer(reader)).status == 200
        writer.write(check_request(token=token) + check_request() + check_request(token=token))
        statuses = [(await read_answer(reader)).status for _ in range(3)]
    assert statuses == [200, 401, 200]


async def test_nothing_after_a_closing_check_is_decided(
    authz_http: RunningAuthz, issuer: Issuer, caplog: pytest.LogCaptureFixture
) -> None:
    """A check asking to close is answered and the connection closed; what was pipelined after
    it is neither answered nor decided (one decision line)."""
    token = issuer.token()
    closing = check_request(token=token, headers={"connection": "close"})
    with caplog.at_level(logging.INFO, logger="authz.decision"):
        async with connection(authz_http) as (reader, writer):
            writer.write(closing + check_request(token=token, request_id="req-2"))
            assert (await read_answer(reader)).status == 200
            assert await reader.read() == b""
    decisions = [r for r in caplog.records if r.getMessage() == "decision"]
    assert [r.__dict__["orrery_fields"]["request_id"] for r in decisions] == ["req-1"]


@pytest.mark.redis
async def test_checks_that_wait_are_answered_in_order(
    jwks_file: Path, issuer: Issuer, redis_url: str
) -> None:
    """With the limiter in Redis every check waits; pipelined checks still answer in order."""
    env = {
        **base_env(jwks_file=jwks_file),
        "ORRERY_A2A_AUTHZ_HTTP_ADDR": "127.0.0.1:0",
        "ORRERY_A2A_REDIS_URL": redis_url,
    }
    token = issuer.token()
    async with running_authz(env) as authz, connection(authz) as (reader, writer):
        writer.write(check_request(token=token) + check_request() + check_request(token=token))
        statuses = [(await read_answer(reader)).status for _ in range(3)]
    assert statuses == [200, 401, 200]


async def test_repeated_authorization_fields_are_two_credentials(
    authz_http: RunningAuthz, issuer: Issuer
) -> None:
    """Repeated fields are joined with "," as in the gRPC headers map: two tokens, refused."""
    token = issuer.token()
    request = check_request(token=token, headers={"authorization": f"Bearer {token}"})
    answer = await exchange(authz_http, request)
    assert answer.status == 401
    assert json.loads(answer.body)["error_description"] == "more than one Authorization header"


@pytest.mark.parametrize(
    "data",
    [
        b"NOT HTTP AT ALL\r\n\r\n",
        b"GET /a2a HTTP/1.1\r\nhost: x\r\n\r\n",  # outside the check prefix
        b"POST /ext_authz/a2a HTTP/1.1\r\nhost: x\r\ncontent-length: 3\r\n\r\nabc",  # a body
        b"GET /ext_authz/a2a HTTP/1.1\r\nhost: x\r\nconnection: upgrade\r\nupgrade: h2c\r\n\r\n",
        b"GET /ext_authz/a2a HTTP/1.1\r\nx-big: " + b"a" * MAX_HEAD_BYTES + b"\r\n\r\n",
    ],
)
async def test_what_is_not_a_check_is_refused_and_closed(
    authz_http: RunningAuthz, data: bytes
) -> None:
    """Malformed, oversized, bodied, upgrading or unprefixed requests: 400, connection closed."""
    async with connection(authz_http) as (reader, writer):
        writer.write(data)
        answer = await read_answer(reader)
        assert answer.status == 400
        assert answer.headers["connection"] == "close"
        assert await reader.read() == b""


async def test_health_follows_the_keys(authz_http: RunningAuthz) -> None:
    """GET /healthz answers 200 while usable keys are loaded."""
    answer = await exchange(authz_http, b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
    assert answer.status == 200
    assert json.loads(answer.body) == {"status": "serving"}


async def test_without_the_variable_there_is_no_http_transport(authz: RunningAuthz) -> None:
    """ORRERY_A2A_AUTHZ_HTTP_ADDR unset: gRPC only."""
    assert authz.bound.http is None


async def test_a_denied_head_check_is_answered_without_a_body(
    authz_http: RunningAuthz, issuer: Issuer
) -> None:
    """A check for a HEAD request is itself a HEAD: its denial has headers only (a body would be
    read as the start of the next answer), so the next check on the connection is answered
    cleanly."""
    head = check_request().replace(b"POST ", b"HEAD ", 1)
    async with connection(authz_http) as (reader, writer):
        writer.write(head + head + check_request(token=issuer.token()))
        for _ in range(2):
            denial = await reader.readuntil(b"\r\n\r\n")
            assert denial.startswith(b"HTTP/1.1 401 ")
            assert b"www-authenticate: Bearer" in denial
        assert (await read_answer(reader)).status == 200


async def test_trailers_are_not_headers(authz_http: RunningAuthz, issuer: Issuer) -> None:
    """A chunked check whose trailer carries a credential is refused (400, closed): only the
    header section is what Envoy asks about."""
    data = (
        f"POST {CHECK_PREFIX.decode()}/a2a HTTP/1.1\r\nhost: x\r\nx-request-id: req-1\r\n"
        f"transfer-encoding: chunked\r\n\r\n0\r\nauthorization: Bearer {issuer.token()}\r\n\r\n"
    ).encode()
    async with connection(authz_http) as (reader, writer):
        writer.write(data)
        answer = await read_answer(reader)
        assert (answer.status, answer.headers["connection"]) == (400, "close")
        assert await reader.read() == b""


async def test_an_idle_connection_is_closed(jwks_file: Path, issuer: Issuer) -> None:
    """A connection with nothing to answer for ORRERY_A2A_AUTHZ_HTTP_IDLE_TIMEOUT is closed; one
    in use is not."""
    env = {
        **base_env(jwks_file=jwks_file),
        "ORRERY_A2A_AUTHZ_HTTP_ADDR": "127.0.0.1:0",
        "ORRERY_A2A_AUTHZ_HTTP_IDLE_TIMEOUT": "200ms",
    }
    async with running_authz(env) as authz, connection(authz) as (reader, writer):
        writer.write(check_request(token=issuer.token()))
        assert (await read_answer(reader)).status == 200
        assert await asyncio.wait_for(reader.read(), timeout=10) == b""


async def test_connections_past_the_cap_are_closed_unread(jwks_file: Path, issuer: Issuer) -> None:
    """With ORRERY_A2A_AUTHZ_HTTP_MAX_CONNECTIONS open, one more is closed without an answer;
    the open ones still answer, and a connection is accepted again once one closes."""
    env = {
        **base_env(jwks_file=jwks_file),
        "ORRERY_A2A_AUTHZ_HTTP_ADDR": "127.0.0.1:0",
        "ORRERY_A2A_AUTHZ_HTTP_MAX_CONNECTIONS": "2",
    }
    token = issuer.token()
    async with running_authz(env) as authz:
        async with connection(authz) as (reader1, writer1), connection(authz):
            async with connection(authz) as (reader3, writer3):
                writer3.write(check_request(token=token))
                assert await asyncio.wait_for(reader3.read(), timeout=10) == b""
            writer1.write(check_request(token=token))
            assert (await read_answer(reader1)).status == 200

        async def answered() -> bool:
            async with connection(authz) as (reader, writer):
                writer.write(check_request(token=token))
                with contextlib.suppress(asyncio.IncompleteReadError):
                    return (await read_answer(reader)).status == 200
                return False

        await eventually(answered)
