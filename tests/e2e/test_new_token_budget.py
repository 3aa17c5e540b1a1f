"""What a token not verified yet may cost, through real Envoy and both ext_authz transports
(docs/authz.md#what-a-token-not-verified-yet-may-cost): the client address Envoy trusts reaches
authz, which answers a flood of new tokens from it 429 `new_token_rate_limited` and a flood from
every address 503 `verification_busy`, while tokens it verified before are still served; and a
HEAD check over the HTTP transport leaves Envoy's connection to authz in step.

Envoy's own per-address bucket (100 a second) is far above what these tests send.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from stack.envoy_config import Config, public_manager
from tests.authz.support import Issuer
from tests.e2e.conftest import RunningEnvoy, raw_request
from tests.e2e.test_transport_conformance import Transports, bearer, both_transports

pytestmark = [pytest.mark.envoy, pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module")]

PER_CLIENT = 3  # signature checks a minute per client address, on the first edge


def forged(issuer: Issuer) -> str:
    """A published kid, a random signature, never sent before (so never a remembered refusal)."""
    return issuer.token(jti=secrets.token_hex(8), signature=secrets.token_bytes(64))


async def post(envoy: RunningEnvoy, token: str, source: str) -> tuple[int, dict[str, str], Any]:
    response = await raw_request(envoy.port, "POST", "/a2a", bearer(token), source=source)
    body = json.loads(response.body) if response.body else None
    return response.status, response.headers, body


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def per_client(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Transports]:
    """Both transports in front of one authz with a small per-address budget."""
    root = tmp_path_factory.mktemp("per-client")
    async with both_transports(
        root,
        ORRERY_A2A_CLIENT_VERIFY_LIMIT=f"{PER_CLIENT}/minute",
        ORRERY_A2A_RATE_LIMIT="1000/second",
    ) as started:
        yield started


@pytest.mark.parametrize(
    ("transport", "flooder", "other"),
    [("grpc", "127.0.0.21", "127.0.0.22"), ("http", "127.0.0.23", "127.0.0.24")],
)
async def test_a_flood_of_new_tokens_from_one_address_is_refused_by_authz(
    per_client: Transports, transport: str, flooder: str, other: str
) -> None:
    """Past its budget the flooding address's new tokens are 429 new_token_rate_limited with
    Retry-After (JSON, from authz through Envoy); its token verified before the flood is still
    served, and another address's new tokens are still verified."""
    envoy = getattr(per_client, transport)
    issuer = per_client.issuer
    valid = issuer.token(sub=f"svc-{transport}")
    assert (await post(envoy, valid, flooder))[0] == 200
    statuses = [(await post(envoy, forged(issuer), flooder))[0] for _ in range(PER_CLIENT - 1)]
    assert statuses == [401] * (PER_CLIENT - 1)
    status, headers, body = await post(envoy, forged(issuer), flooder)
    assert (status, body["error"]) == (429, "new_token_rate_limited")
    assert int(headers["retry-after"]) >= 1
    assert (await post(envoy, valid, flooder))[0] == 200
    assert (await post(envoy, forged(issuer), other))[0] == 401


async def test_a_flood_from_every_address_meets_the_process_budget(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Past the process's budget every new token is 503 verification_busy with Retry-After, on
    either transport (the HTTP one carries the 503 under 463: Envoy restores it), and a token
    verified before is still served."""
    root = tmp_path_factory.mktemp("per-process")
    async with both_transports(
        root, ORRERY_A2A_VERIFY_LIMIT="3/minute", ORRERY_A2A_RATE_LIMIT="1000/second"
    ) as edges:
        issuer = edges.issuer
        valid = issuer.token()
        assert (await post(edges.grpc, valid, "127.0.0.31"))[0] == 200
        assert (await post(edges.grpc, forged(issuer), "127.0.0.32"))[0] == 401
        assert (await post(edges.http, forged(issuer), "127.0.0.33"))[0] == 401
        for envoy, source in ((edges.http, "127.0.0.34"), (edges.grpc, "127.0.0.35")):
            status, headers, body = await post(envoy, forged(issuer), source)
            assert (status, body["error"]) == (503, "verification_busy")
            assert int(headers["retry-after"]) >= 1
        assert (await post(edges.http, valid, "127.0.0.36"))[0] == 200


def _approvals_any_method(config: Config) -> None:
    """The approvals route as a mesh that does not restrict methods routes it: HEAD reaches
    authz."""
    routes = public_manager(config)["route_config"]["virtual_hosts"][0]["routes"]
    for route in routes:
        if route["name"] == "approvals":
            del route["match"]["headers"]


async def _head(envoy: RunningEnvoy, path: str) -> int:
    reader, writer = await asyncio.open_connection("127.0.0.1", envoy.port)
    try:
        writer.write(
            f"HEAD {path} HTTP/1.1\r\nHost: edge.test\r\nConnection: close\r\n\r\n".encode()
        )
        head = await reader.readuntil(b"\r\n\r\n")
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
    return int(head.split(b" ", 2)[1])


async def _protocol_errors(envoy: RunningEnvoy) -> int:
    async with aiohttp.ClientSession() as http:
        url = f"http://{envoy.admin}/stats?filter=^cluster\\.authz\\.upstream_cx_protocol_error$"
        async with http.get(url) as response:
            text = await response.text()
    return int(text.rpartition(":")[2])


async def test_head_denials_keep_envoys_connection_to_authz_in_step(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Three HEADs denied over the HTTP transport: three 401s, no protocol error on Envoy's
    connections to authz, and the next check on them is answered."""
    root = tmp_path_factory.mktemp("head")
    async with both_transports(root, edit=_approvals_any_method) as edges:
        statuses = [await _head(edges.http, "/approvals/act-1") for _ in range(3)]
        assert statuses == [401, 401, 401]
        assert await _protocol_errors(edges.http) == 0
        assert (await post(edges.http, edges.issuer.token(), "127.0.0.41"))[0] == 200
