"""Stand-in for `python -m adapter`: the process contract, the card, and checked assertions.

Every request but the card and /readyz must carry a principal assertion valid for its request id
and surface (the real codec), else 401. SendMessage answers a completed task naming the principal,
or — when the text mentions "restart" — an input-required task with an approval data part.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import time
import uuid
from typing import Any

from aiohttp import web

from authz import assertion, logs
from authz.env import parse_address
from authz.errors import InvalidAssertion

log = logging.getLogger("fake.adapter")


def card(public_url: str) -> dict[str, Any]:
    return {
        "name": "Fake Orrery",
        "description": "stand-in adapter",
        "version": "0.0.0",
        "supportedInterfaces": [
            {"url": public_url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
        ],
        "capabilities": {"streaming": False, "pushNotifications": False},
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": [{"id": "ask", "name": "ask", "description": "ask", "tags": ["demo"]}],
    }


def task_for(text: str, principal_key: str, origin: str) -> dict[str, Any]:
    task_id, context_id = str(uuid.uuid4()), str(uuid.uuid4())
    if "restart" in text:
        action = "act-" + uuid.uuid4().hex[:8]
        message = {
            "messageId": str(uuid.uuid4()),
            "role": "ROLE_AGENT",
            "parts": [
                {"text": "restart checkout needs approval"},
                {
                    "data": {
                        "action_id": action,
                        "tool": "restart_service",
                        "args": {"service": "checkout"},
                        "level": "L3",
                        "expires_at": "2030-01-01T00:00:00Z",
                        "approve_url": f"{origin}/approvals/{action}",
                    }
                },
            ],
        }
        return {
            "id": task_id,
            "contextId": context_id,
            "status": {"state": "TASK_STATE_INPUT_REQUIRED", "message": message},
        }
    return {
        "id": task_id,
        "contextId": context_id,
        "status": {"state": "TASK_STATE_COMPLETED"},
        "artifacts": [
            {"artifactId": "reply", "parts": [{"text": f"echo {text} for {principal_key}"}]}
        ],
    }


def build(env: dict[str, str]) -> web.Application:
    keys = assertion.AssertionKeys.parse(env["ORRERY_A2A_ASSERTION_KEYS"])
    public_url = env["ORRERY_A2A_PUBLIC_URL"]
    origin = public_url.rsplit("/", 1)[0]

    def principal(request: web.Request, surface: str) -> assertion.Assertion:
        try:
            return assertion.verify(
                keys,
                request.headers.get(assertion.HEADER),
                request_id=request.headers.get("x-request-id"),
                surface=surface,  # type: ignore[arg-type]
                now=int(time.time()),
            )
        except InvalidAssertion as exc:
            raise web.HTTPUnauthorized(
                text=f'{{"error":"{exc.reason}"}}', content_type="application/json"
            ) from None

    async def get_card(_: web.Request) -> web.Response:
        return web.json_response(card(public_url))

    async def a2a(request: web.Request) -> web.Response:
        who = principal(request, "a2a")
        rpc = await request.json()
        text = rpc["params"]["message"]["parts"][0]["text"]
        result = {"task": task_for(text, who.principal.key, origin)}
        return web.json_response({"jsonrpc": "2.0", "id": rpc["id"], "result": result})

    async def decide(request: web.Request) -> web.Response:
        who = principal(request, "approvals")
        decision = (await request.json())["decision"]
        return web.json_response(
            {
                "action_id": request.match_info["action_id"],
                "status": "approved" if decision == "approve" else "denied",
                "message": f"decided by {who.principal.subject}",
            }
        )

    async def readyz(_: web.Request) -> web.Response:
        return web.json_response({"status": "ready"})

    app = web.Application()
    app.router.add_get("/.well-known/agent-card.json", get_card)
    app.router.add_post("/a2a", a2a)
    app.router.add_post("/a2a/", a2a)
    app.router.add_post("/approvals/{action_id}", decide)
    app.router.add_get("/readyz", readyz)
    return app


async def main() -> int:
    env = dict(os.environ)
    logs.configure()
    runner = web.AppRunner(build(env), access_log=None)
    await runner.setup()
    host, port = parse_address(env["ORRERY_A2A_ADAPTER_ADDR"])
    await web.TCPSite(runner, host, port).start()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(signum, stop.set)
    logs.event(log, "serving", addr=f"{host}:{runner.addresses[0][1]}")
    await stop.wait()
    await runner.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
