"""Browser-based A2A clients, in a real headless Chromium (docs/contract.md#browsers-cors).

The edge is started by `orrery-a2a up`'s code with `ORRERY_A2A_CORS_ORIGINS` naming one loopback
origin (`tuned_edge`). Two pages are served from loopback: one from that origin, one from another
port (another origin). The allowed page fetches the card and calls `POST /a2a` with a bearer
token, reads a refusal and its request id, and cannot make a credentialed request; the other page
can read nothing, and its token-bearing call never reaches authz or the adapter (the browser stops
at the preflight).
"""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncGenerator, AsyncIterator

import pytest
from aiohttp import web

from tests.e2e.browser import Page, headless_chromium
from tests.e2e.conftest import TunedEdge
from tests.e2e.edge import unique

pytestmark = [pytest.mark.envoy, pytest.mark.e2e]

PAGE = "<!doctype html><html><head><title>console</title></head><body></body></html>"

# What a browser console would do: read the card, call A2A with its token, read a refusal, and
# try a credentialed fetch. Every failure is caught and reported as a value.
CLIENT = """
(async () => {
  const edge = %(edge)s, token = %(token)s, out = {};
  const rpc = {jsonrpc: "2.0", id: 1, method: "ListTasks", params: {}};
  const json = {"Content-Type": "application/json", "A2A-Version": "1.0"};
  async function attempt(name, run) {
    try { out[name] = await run(); } catch (error) { out[name] = {blocked: String(error)}; }
  }
  await attempt("card", async () => {
    const response = await fetch(edge + "/.well-known/agent-card.json");
    return {status: response.status, card: await response.json()};
  });
  await attempt("call", async () => {
    const response = await fetch(edge + "/a2a", {
      method: "POST",
      headers: {...json, "Authorization": "Bearer " + token},
      body: JSON.stringify(rpc),
    });
    return {status: response.status, body: await response.json(),
            requestId: response.headers.get("x-request-id")};
  });
  await attempt("refusal", async () => {
    const response = await fetch(edge + "/a2a", {
      method: "POST", headers: json, body: JSON.stringify(rpc),
    });
    return {status: response.status, body: await response.json(),
            challenge: response.headers.get("www-authenticate"),
            requestId: response.headers.get("x-request-id")};
  });
  await attempt("credentialed", async () => {
    const response = await fetch(edge + "/.well-known/agent-card.json", {credentials: "include"});
    return {status: response.status};
  });
  return out;
})()
"""


async def _page(_: web.Request) -> web.Response:
    return web.Response(text=PAGE, content_type="text/html")


async def _serve(sock: socket.socket) -> AsyncGenerator[str, None]:
    """Serve PAGE on a duplicate of `sock` (aiohttp closes what it is given; the origin's port
    stays bound for the next test)."""
    app = web.Application()
    app.router.add_get("/", _page)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.SockSite(runner, sock.dup()).start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/"
    finally:
        await runner.cleanup()


@pytest.fixture
async def pages(tuned_edge: TunedEdge) -> AsyncIterator[tuple[str, str]]:
    """URLs of a page on the allowed origin and one on another origin."""
    allowed, other = _serve(tuned_edge.allowed), _serve(tuned_edge.other)
    allowed_url, other_url = await anext(allowed), await anext(other)
    try:
        yield allowed_url, other_url
    finally:
        for server in (allowed, other):
            await server.aclose()


@pytest.fixture
async def browser() -> AsyncIterator[Page]:
    async with headless_chromium() as page:
        yield page


async def _console(page: Page, url: str, tuned_edge: TunedEdge) -> dict[str, dict[str, object]]:
    edge = tuned_edge.edge
    await page.goto(url)
    token = edge.token(subject=unique("browser-user"))
    result: dict[str, dict[str, object]] = await page.run(
        CLIENT % {"edge": json.dumps(edge.url), "token": json.dumps(token)}
    )
    return result


async def test_a_page_from_an_allowed_origin_calls_the_edge_with_a_bearer_token(
    tuned_edge: TunedEdge, pages: tuple[str, str], browser: Page
) -> None:
    """The card and an authenticated ListTasks are readable; so is a refusal, with its
    challenge and the request id the logs carry; a credentialed fetch is refused by the
    browser (the edge never allows credentials)."""
    allowed_url, _ = pages
    result = await _console(browser, allowed_url, tuned_edge)
    card, call, refusal = result["card"], result["call"], result["refusal"]
    assert card["status"] == 200
    # the page's JSON, typed `object` until the assertions below read it
    assert card["card"]["supportedInterfaces"][0]["url"] == f"{tuned_edge.edge.url}/a2a"  # type: ignore[index]
    assert call["status"] == 200
    # as above: the page's JSON, typed `object`
    assert "result" in call["body"]  # type: ignore[operator]
    await tuned_edge.edge.event("adapter", "a2a_request", request_id=call["requestId"])
    assert refusal["status"] == 401
    assert refusal["body"] == {
        "error": "missing_credential",
        "error_description": "a bearer token is required",
    }
    assert refusal["challenge"] == 'Bearer realm="orrery-a2a"'
    await tuned_edge.edge.event("authz", "decision", request_id=refusal["requestId"])
    assert "blocked" in result["credentialed"]


async def test_a_page_from_another_origin_can_read_nothing(
    tuned_edge: TunedEdge, pages: tuple[str, str], browser: Page
) -> None:
    """Every fetch fails in the browser; the calls to /a2a stop at their preflight (which Envoy
    answers without CORS headers), so they reach neither authz nor the adapter."""
    _, other_url = pages
    edge = tuned_edge.edge
    before = await edge.adapter_requests()
    decisions = len(edge.events("authz", "decision"))
    result = await _console(browser, other_url, tuned_edge)
    for name in ("card", "call", "refusal", "credentialed"):
        assert "blocked" in result[name], (name, result[name])
    assert await edge.adapter_requests() == before
    assert len(edge.events("authz", "decision")) == decisions
