"""Both ext_authz transports give the same answers, through real Envoy.

One authz process serves gRPC and HTTP (ORRERY_A2A_AUTHZ_HTTP_ADDR) on the same keys, limiter and
caches; two Envoys run envoy/envoy.yaml, one rendered for each transport, in front of one upstream
that echoes the headers it received as its body. Every case sends the same request (same bytes,
same token) through both Envoys and asserts the answers are equal: status, every header, body —
and for an allow, what reached the upstream: the headers set and removed, and the assertion
(verified; its claims equal except the request id Envoy generated and the second it was issued).

Not compared: `date`, `x-request-id` (each Envoy generates its own; both must send one) and the
order of header fields (Envoy's Lua filter emits its refusal headers in table order, which varies
between processes; order carries no meaning in HTTP).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
import pytest_asyncio
from aiohttp import web

from contract.assertion import Assertion, AssertionKeys, verify
from stack.envoy_config import AuthzTransport, Config
from tests.authz.support import CONSOLE, CONSOLE_CLIENT, Issuer, SigningKey, base_env
from tests.e2e.conftest import RawResponse, RunningEnvoy, envoy_for, raw_request
from tests.e2e.edge import running_edge
from tests.processes import EventProcess

REPO = Path(__file__).resolve().parents[2]
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
PER_REQUEST = frozenset({"date", "x-request-id"})
RATE = 2  # per subject per hour: one request through each Envoy, then refusals

pytestmark = [pytest.mark.envoy, pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module")]


@dataclass
class Transports:
    """The two Envoys (gRPC and HTTP ext_authz) in front of one authz and one echo upstream."""

    grpc: RunningEnvoy
    http: RunningEnvoy
    issuer: Issuer
    assertion_keys: AssertionKeys
    other_key: SigningKey

    async def both(
        self, method: str, path: str, headers: Mapping[str, str] | None = None
    ) -> tuple[RawResponse, RawResponse]:
        sent = dict(headers or {})
        return (
            await raw_request(self.grpc.port, method, path, sent),
            await raw_request(self.http.port, method, path, sent),
        )


async def echo(request: web.Request) -> web.Response:
    """What the adapter would receive, as the answer's body."""
    return web.json_response({"path": request.path_qs, "headers": dict(request.headers)})


@contextlib.asynccontextmanager
async def both_transports(
    root: Path, *, edit: Callable[[Config], None] | None = None, **env: str
) -> AsyncIterator[Transports]:
    """authz (both transports, `env` over the defaults below), the echo upstream and one Envoy
    per transport (its config changed by `edit`, when given), under `root`."""
    issuer = Issuer.with_keys("ES256")
    jwks = root / "jwks.json"
    jwks.write_text(json.dumps(issuer.jwks()))
    authz_env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        **base_env(jwks_file=jwks),
        "ORRERY_A2A_AUTHZ_HTTP_ADDR": "127.0.0.1:0",
        "ORRERY_A2A_RATE_LIMIT": f"{RATE}/hour",
        **env,
    }
    authz = EventProcess([sys.executable, "-m", "authz"], authz_env)
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", echo)
    runner = web.AppRunner(app, access_log=None)
    try:
        serving = authz.wait_for("serving")
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        upstream = int(runner.addresses[0][1])
        (root / "grpc").mkdir()
        (root / "http").mkdir()
        async with (
            envoy_for(
                root / "grpc", authz_port=_port(serving["grpc"]), adapter_port=upstream, edit=edit
            ) as g,
            envoy_for(
                root / "http",
                authz_port=_port(serving["http"]),
                adapter_port=upstream,
                authz_transport="http",
                edit=edit,
            ) as h,
        ):
            yield Transports(
                g,
                h,
                issuer,
                AssertionKeys.parse(authz_env["ORRERY_A2A_ASSERTION_KEYS"]),
                SigningKey.generate("ES256"),
            )
    finally:
        await runner.cleanup()
        authz.stop()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def transports(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Transports]:
    async with both_transports(tmp_path_factory.mktemp("transports")) as started:
        yield started


def _port(address: str) -> int:
    return int(address.rpartition(":")[2])


def _subject() -> str:
    return f"svc-{uuid.uuid4().hex[:10]}"


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def answer_of(response: RawResponse) -> tuple[int, list[tuple[str, str]], bytes]:
    """Status, headers (sorted, without per-request ones), body: what must be equal."""
    assert response.headers.get("x-request-id"), "every answer carries a request id"
    headers = sorted((k, v) for k, v in response.headers.items() if k not in PER_REQUEST)
    return response.status, headers, response.body


def upstream_of(response: RawResponse, keys: AssertionKeys) -> tuple[dict[str, str], Assertion]:
    """What reached the upstream: its headers without the per-request ones and the assertion,
    and the assertion verified for the request id Envoy sent, without that id and its times."""
    echoed = json.loads(response.body)
    seen = {k.lower(): v for k, v in echoed["headers"].items()}
    verified = verify(
        keys,
        seen.pop("x-orrery-principal"),
        request_id=seen["x-request-id"],
        surface="approvals" if echoed["path"].startswith("/approvals/") else "a2a",
        now=int(time.time()),
    )
    headers = {k: v for k, v in seen.items() if k not in PER_REQUEST and k != "content-length"}
    return headers, replace(verified, request_id="", issued_at=0, expires_at=0)


async def assert_same_allow(
    transports: Transports, path: str, headers: Mapping[str, str]
) -> dict[str, str]:
    """Both allow; the answers and what reached the upstream are the same. The upstream's
    headers, for the caller to check further."""
    grpc, http = await transports.both("POST", path, headers)
    assert grpc.status == http.status == 200, (grpc.body, http.body)
    _, grpc_headers, _ = answer_of(grpc)
    _, http_headers, _ = answer_of(http)
    without_length = [(k, v) for k, v in grpc_headers if k != "content-length"]
    assert without_length == [(k, v) for k, v in http_headers if k != "content-length"]
    keys = transports.assertion_keys
    grpc_upstream, grpc_assertion = upstream_of(grpc, keys)
    http_upstream, http_assertion = upstream_of(http, keys)
    assert grpc_upstream == http_upstream
    assert grpc_assertion == http_assertion
    return http_upstream


async def assert_same_denial(
    transports: Transports, path: str, headers: Mapping[str, str], status: int, reason: str
) -> None:
    grpc, http = await transports.both("POST", path, headers)
    assert answer_of(grpc) == answer_of(http)
    assert grpc.status == status
    assert json.loads(grpc.body)["error"] == reason


async def test_an_allow_sets_the_same_assertion_and_removes_the_credential(
    transports: Transports,
) -> None:
    """Same answer, same upstream headers, same assertion claims; no authorization upstream."""
    token = transports.issuer.token(sub=(sub := _subject()), client_id=sub)
    upstream = await assert_same_allow(transports, "/a2a", bearer(token))
    assert "authorization" not in upstream
    assert "x-orrery-trace-link" not in upstream


async def test_an_allow_with_a_query_string(transports: Transports) -> None:
    """The query reaches the decision on both transports and is allowed alike."""
    token = transports.issuer.token(sub=(sub := _subject()), client_id=sub)
    await assert_same_allow(transports, "/a2a?tenant=blue", bearer(token))


async def test_an_allow_links_the_trace_and_drops_the_inbound_one(transports: Transports) -> None:
    """traceparent and tracestate go, x-orrery-trace-link is set, on both transports."""
    token = transports.issuer.token(sub=(sub := _subject()), client_id=sub)
    headers = {**bearer(token), "traceparent": TRACEPARENT, "tracestate": "a=b"}
    upstream = await assert_same_allow(transports, "/a2a", headers)
    assert upstream["x-orrery-trace-link"] == TRACEPARENT[:55]
    assert "traceparent" not in upstream
    assert "tracestate" not in upstream


async def test_an_allow_on_the_approvals_surface(transports: Transports) -> None:
    """A person's console token on /approvals/{id}: the same human assertion."""
    token = transports.issuer.token(
        sub=_subject(), aud=CONSOLE, client_id=CONSOLE_CLIENT, roles=["admin"]
    )
    await assert_same_allow(transports, "/approvals/act-1", bearer(token))


@pytest.mark.parametrize(
    ("case", "status", "reason"),
    [
        ("no token", 401, "missing_credential"),
        ("basic scheme", 401, "missing_credential"),
        ("not a jws", 401, "token_invalid"),
        ("expired", 401, "token_expired"),
        ("other audience", 401, "token_invalid"),
        ("unknown key", 401, "unknown_key"),
        ("hop header", 508, "loop_detected"),
        ("forged assertion", 400, "reserved_header"),
        ("query token", 400, "invalid_request"),
        ("no such route", 404, "not_found"),
        ("no such approval route", 403, "forbidden"),
        ("no role", 403, "insufficient_scope"),
    ],
)
async def test_a_refusal_is_the_same_on_both(
    transports: Transports, case: str, status: int, reason: str
) -> None:
    """Every status, header and body of a refusal, whichever part of the edge refuses."""
    issuer = transports.issuer
    sub = _subject()
    tokens: dict[str, tuple[str, dict[str, str]]] = {
        "no token": ("/a2a", {}),
        "basic scheme": ("/a2a", {"authorization": "Basic Zm9vOmJhcg=="}),
        "not a jws": ("/a2a", bearer("not-a-token")),
        "expired": ("/a2a", bearer(issuer.token(sub=sub, exp=int(time.time()) - 3600))),
        "other audience": ("/a2a", bearer(issuer.token(sub=sub, aud="someone-else"))),
        "unknown key": ("/a2a", bearer(issuer.token(sub=sub, key=transports.other_key))),
        "hop header": ("/a2a", {**bearer(issuer.token(sub=sub)), "x-orrery-hop": "1"}),
        "forged assertion": (
            "/a2a",
            {**bearer(issuer.token(sub=sub)), "x-orrery-principal": "forged"},
        ),
        "query token": ("/a2a?access_token=abc", {}),
        "no such route": ("/elsewhere", bearer(issuer.token(sub=sub))),
        "no such approval route": ("/approvals/a/b", bearer(issuer.token(sub=sub))),
        "no role": ("/a2a", bearer(issuer.token(sub=sub, roles=[]))),
    }
    path, headers = tokens[case]
    await assert_same_denial(transports, path, headers, status, reason)


async def test_a_rate_limited_subject_is_refused_alike(transports: Transports) -> None:
    """429 with the same Retry-After and RateLimit fields once the subject's budget is spent."""
    token = transports.issuer.token(sub=(sub := _subject()), client_id=sub)
    await assert_same_allow(transports, "/a2a", bearer(token))  # the budget: one each
    await assert_same_denial(transports, "/a2a", bearer(token), 429, "rate_limited")


async def test_a_body_is_never_sent_to_authz(transports: Transports) -> None:
    """A request with a body is checked like one without (Envoy sends authz no body)."""
    token = transports.issuer.token(sub=(sub := _subject()), client_id=sub)
    body = b'{"jsonrpc": "2.0"}'
    grpc = await raw_request(transports.grpc.port, "POST", "/a2a", bearer(token), body=body)
    http = await raw_request(transports.http.port, "POST", "/a2a", bearer(token), body=body)
    assert grpc.status == http.status == 200


async def test_authz_unreachable_is_the_same_503(tmp_path: Path, closed_port: int) -> None:
    """Nothing listening where authz should be: both fail closed with the same 503."""
    answers = []
    transport: AuthzTransport
    for transport in ("grpc", "http"):
        (tmp_path / transport).mkdir()
        async with envoy_for(
            tmp_path / transport,
            authz_port=closed_port,
            adapter_port=closed_port,
            authz_transport=transport,
        ) as envoy:
            answers.append(await raw_request(envoy.port, "POST", "/a2a", bearer("a.b.c")))
    grpc, http = answers
    assert answer_of(grpc) == answer_of(http)
    assert grpc.status == 503
    assert json.loads(grpc.body)["error"] == "authz_unavailable"


async def test_up_with_the_http_transport_serves_a2a(tmp_path: Path) -> None:
    """`orrery-a2a up --authz-transport http`: the real adapter answers through HTTP ext_authz
    (Envoy's authz cluster answered with HTTP 200s), and a refusal is authz's own."""
    with running_edge(tmp_path, {"ORRERY_A2A_AUTHZ_TRANSPORT": "http"}) as edge:
        answer = await edge.rpc(edge.token(), "GetTask", {"id": "no-such-task"})
        assert answer.status_code == 200
        assert answer.json()["error"]["code"] == -32001  # TaskNotFound: the adapter answered
        refused = await edge.rpc(None, "GetTask", {"id": "no-such-task"})
        assert refused.status_code == 401
        assert refused.json()["error"] == "missing_credential"
        assert await edge.envoy_counter("cluster.authz.upstream_rq_200") >= 1
        assert edge.component("authz").details["http"]


async def test_a_5xx_denial_is_the_same_503(tmp_path: Path, closed_port: int) -> None:
    """Redis unreachable with ORRERY_A2A_REDIS_FAILURE_MODE=deny: 503 limiter_unavailable on
    both (over HTTP it travels as 463 and Envoy's local reply restores 503)."""
    async with both_transports(
        tmp_path,
        ORRERY_A2A_REDIS_URL=f"redis://127.0.0.1:{closed_port}/0",
        ORRERY_A2A_REDIS_FAILURE_MODE="deny",
    ) as transports:
        token = transports.issuer.token(sub=(sub := _subject()), client_id=sub)
        await assert_same_denial(transports, "/a2a", bearer(token), 503, "limiter_unavailable")
