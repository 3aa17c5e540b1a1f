"""Who the client is when Envoy is not the first hop: trusted X-Forwarded-For hops, PROXY protocol.

Behind an ingress or a load balancer every connection comes from the proxy, so the per-address
budget in front of authz would be one bucket for everyone. With `ORRERY_A2A_XFF_TRUSTED_HOPS=1`
Envoy takes the address the proxy appended to X-Forwarded-For; with `ORRERY_A2A_PROXY_PROTOCOL`
the address the load balancer's PROXY header names. Without either, a client's own
X-Forwarded-For is dropped and the TCP peer is the client. The real Envoy, a budget of one
request a minute per address, so the second request from one client is its 429.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from stack.edge_policy import EdgePolicy
from tests.e2e.conftest import FakeAuthz, Recorder, envoy_for, raw_exchange, raw_request

pytestmark = [pytest.mark.envoy, pytest.mark.e2e]

ONE_A_MINUTE = (1, 60)  # the client budget: one request a minute, one at once
CARD = "/.well-known/agent-card.json"


async def _status(port: int, forwarded: str) -> int:
    response = await raw_request(port, "GET", CARD, {"x-forwarded-for": forwarded})
    return response.status


async def test_trusted_hops_give_each_client_behind_the_proxy_its_own_budget(
    tmp_path: Path, fake_authz: FakeAuthz, recorder: Recorder
) -> None:
    """With one trusted hop, the address the proxy appended is the client: a second request of
    one client is refused 429, another client behind the same proxy is served."""
    policy = EdgePolicy(client_rate=ONE_A_MINUTE, client_burst=1, trusted_hops=1)
    async with envoy_for(
        tmp_path, authz_port=fake_authz.port, adapter_port=recorder.port, policy=policy
    ) as envoy:
        assert await _status(envoy.port, "198.51.100.1") == 200
        assert await _status(envoy.port, "198.51.100.1") == 429
        assert await _status(envoy.port, "198.51.100.2") == 200


async def test_without_trusted_hops_a_clients_forwarded_address_is_ignored(
    tmp_path: Path, fake_authz: FakeAuthz, recorder: Recorder
) -> None:
    """Unset, Envoy is the first hop: a client cannot pick another bucket by sending its own
    X-Forwarded-For, and (the warning of docs/kubernetes.md) everyone behind one proxy shares
    one bucket."""
    policy = EdgePolicy(client_rate=ONE_A_MINUTE, client_burst=1)
    async with envoy_for(
        tmp_path, authz_port=fake_authz.port, adapter_port=recorder.port, policy=policy
    ) as envoy:
        assert await _status(envoy.port, "198.51.100.1") == 200
        assert await _status(envoy.port, "198.51.100.2") == 429


def _proxied(source: str) -> bytes:
    request = f"GET {CARD} HTTP/1.1\r\nHost: edge.test\r\nConnection: close\r\n\r\n"
    return f"PROXY TCP4 {source} 127.0.0.1 40000 443\r\n{request}".encode()


async def test_proxy_protocol_names_the_client_and_is_required(
    tmp_path: Path, fake_authz: FakeAuthz, recorder: Recorder
) -> None:
    """With PROXY protocol, the header's source address is the client (its own budget each),
    and a connection without the header is not served at all: nothing can bypass the load
    balancer's word."""
    policy = EdgePolicy(client_rate=ONE_A_MINUTE, client_burst=1, proxy_protocol=True)
    async with envoy_for(
        tmp_path, authz_port=fake_authz.port, adapter_port=recorder.port, policy=policy
    ) as envoy:
        assert (await raw_exchange(envoy.port, _proxied("198.51.100.1"))).status == 200
        assert (await raw_exchange(envoy.port, _proxied("198.51.100.1"))).status == 429
        assert (await raw_exchange(envoy.port, _proxied("198.51.100.2"))).status == 200
        with pytest.raises((asyncio.IncompleteReadError, ConnectionError)):
            await raw_request(envoy.port, "GET", CARD)
