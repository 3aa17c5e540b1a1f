"""The guarded transport on its own: the origin it was made for, the address it checked, the hop
header, and an edge's reason code read from its error body."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import AsyncIterator

import httpx
import pytest
from aiohttp import web

from gateways.remote.errors import RemoteAgentError
from gateways.remote.settings import Network, RemoteSettings
from gateways.remote.transport import GuardedTransport

LOOPBACK: tuple[Network, ...] = (ipaddress.ip_network("127.0.0.0/8"),)


@pytest.fixture
async def server() -> AsyncIterator[tuple[int, list[dict[str, str]]]]:
    """An aiohttp server answering 508 `loop_detected` on /loop, 200 elsewhere."""
    seen: list[dict[str, str]] = []

    async def answer(request: web.Request) -> web.Response:
        seen.append({k.lower(): v for k, v in request.headers.items()})
        if request.path == "/loop":
            body = {"error": "loop_detected", "error_description": "the call comes from Orrery"}
            return web.json_response(body, status=508)
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield int(runner.addresses[0][1]), seen
    finally:
        await runner.cleanup()


async def get(origin: str, url: str, allow: tuple[Network, ...] = LOOPBACK) -> httpx.Response:
    settings = RemoteSettings(agents={}, allow_networks=allow, max_body_bytes=4096)
    async with httpx.AsyncClient(transport=GuardedTransport(origin, settings)) as http:
        return await http.get(url)


async def test_a_name_is_connected_at_the_address_checked_and_keeps_its_host(
    server: tuple[int, list[dict[str, str]]],
) -> None:
    """`localhost` is resolved, checked and connected by address; the Host header keeps the
    name, and the hop header is on the request."""
    port, seen = server
    addresses = {
        info[4][0] for info in socket.getaddrinfo("localhost", port, type=socket.SOCK_STREAM)
    }
    if addresses != {"127.0.0.1"}:
        pytest.skip(f"localhost resolves to {sorted(addresses)} here, not only 127.0.0.1")
    response = await get(f"http://localhost:{port}/", f"http://localhost:{port}/card")
    assert response.json() == {"ok": True}
    assert seen[0]["host"] == f"localhost:{port}"
    assert seen[0]["x-orrery-hop"] == "1"


async def test_a_name_that_resolves_to_loopback_is_refused_without_the_network(
    server: tuple[int, list[dict[str, str]]],
) -> None:
    """Nothing is sent when the name's address is not allowed."""
    port, seen = server
    with pytest.raises(RemoteAgentError) as caught:
        await get(f"http://localhost:{port}/", f"http://localhost:{port}/card", allow=())
    assert caught.value.reason == "address_refused"
    assert seen == []


async def test_another_origin_is_refused(server: tuple[int, list[dict[str, str]]]) -> None:
    """Another port on the same host is another origin: refused before resolving."""
    port, seen = server
    with pytest.raises(RemoteAgentError) as caught:
        await get(f"http://127.0.0.1:{port + 1}/", f"http://127.0.0.1:{port}/card")
    assert caught.value.reason == "insecure_url"
    assert seen == []


async def test_an_edge_refusal_names_its_reason(server: tuple[int, list[dict[str, str]]]) -> None:
    """A 508 with the edge's error body becomes `remote_refused` naming `loop_detected`."""
    port, _ = server
    with pytest.raises(RemoteAgentError) as caught:
        await get(f"http://127.0.0.1:{port}/", f"http://127.0.0.1:{port}/loop")
    assert (caught.value.reason, caught.value.remote_reason) == ("remote_refused", "loop_detected")
    assert str(caught.value) == "the remote answered HTTP 508 (loop_detected)"
