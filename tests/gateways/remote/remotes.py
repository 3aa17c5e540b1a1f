"""Remote A2A agents for the outbound tests: the a2a-sdk's own server, well-behaved or not.

One uvicorn server (the SDK's stock Starlette JSON-RPC routes, as `bench/adapter_stock_server.py`
serves them) on a socket bound before it starts, in a thread with its own event loop, so sync
fixtures (beside an `Edge`) and async tests alike can use it. Each agent lives under its own path
prefix with its card at `/<name>/card` and its JSON-RPC endpoint at `/<name>/a2a`:

* `echo` answers `echo: <text>`; its card is signed like this edge's own (`CardSigner`, key set
  at `/echo/jwks.json`), so `ECHO_KEY` is its thumbprint;
* `slow` answers only once `release` is set (or the server stops);
* `pictures` answers a data part, `chatty` text over the message limit, `huge` a body over the
  default byte cap;
* `moved` answers its card URL with a redirect to the echo card; `forged` serves the echo card
  with its description changed after signing; `elsewhere` a card whose interface is on another
  origin; `garbled` answers `SendMessage` with a result that is not an A2A response;
* `boomerang` calls back, with this project's own remote-agent tool, the agent named `origin` in
  the settings given to `call_back_to` (an Orrery edge), and answers what became of that call.

`seen` records every request's headers (lower-cased), to check the hop header and the token.
With `certs` (tests/certs.py) the server speaks TLS and is named `https://localhost:PORT`.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn
from a2a.helpers import new_data_message, new_text_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore
from a2a.types import a2a_pb2 as pb
from cryptography.hazmat.primitives import serialization
from google.protobuf.json_format import MessageToDict
from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from adapter.card_signing import CardSigner, load_key
from adapter.gateway import MESSAGE_MAX_CHARS
from gateways.remote.client import RemoteAgents
from gateways.remote.errors import RemoteAgentError
from gateways.remote.metrics import RemoteMetrics
from gateways.remote.settings import RemoteSettings
from tests.certs import Certs
from tests.keys import private_key

START_TIMEOUT = 30.0


def _text(context: RequestContext) -> str:
    return "\n".join(part.text for part in context.message.parts) if context.message else ""


class Behaviour(AgentExecutor):
    """What one remote agent answers (see the module docstring)."""

    def __init__(self, name: str, server: RemoteAgentServer) -> None:
        self.name = name
        self.server = server

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        text = _text(context)
        reply: pb.Message
        if self.name == "pictures":
            reply = new_data_message(
                {"chart": [1, 2, 3]}, context_id=context.context_id, task_id=context.task_id
            )
        elif self.name == "chatty":
            reply = new_text_message(
                "la " * (MESSAGE_MAX_CHARS // 3 + 10),
                context_id=context.context_id,
                task_id=context.task_id,
            )
        elif self.name == "huge":
            reply = new_text_message(
                "x" * 300_000, context_id=context.context_id, task_id=context.task_id
            )
        elif self.name == "slow":
            await asyncio.to_thread(self.server.release.wait, START_TIMEOUT)
            reply = new_text_message("late", context_id=context.context_id, task_id=context.task_id)
        elif self.name == "boomerang":
            reply = new_text_message(
                await self._call_back(text), context_id=context.context_id, task_id=context.task_id
            )
        else:
            reply = new_text_message(
                f"echo: {text}", context_id=context.context_id, task_id=context.task_id
            )
        await event_queue.enqueue_event(reply)

    async def _call_back(self, text: str) -> str:
        callback = self.server.callback
        assert callback is not None, "the boomerang's callback is not configured"
        try:
            answer = await callback.call("origin", text, principal_key="boomerang")
        except RemoteAgentError as exc:
            return f"callback refused: {exc.reason} {exc.remote_reason}"
        return f"callback answered: {answer}"

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        raise NotImplementedError


AGENTS = ("echo", "slow", "pictures", "chatty", "huge", "boomerang")
# Not the SDK's server: a card (and for `garbled` an answer) written by hand.
CARDS_ONLY = ("moved", "forged", "elsewhere", "garbled")


@dataclass
class Recorder:
    """ASGI middleware keeping every request's path and headers."""

    app: ASGIApp
    seen: list[tuple[str, dict[str, str]]] = field(default_factory=list)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
            self.seen.append((scope["path"], headers))
        await self.app(scope, receive, send)


def card(base: str, name: str) -> pb.AgentCard:
    """An A2A 1.0 card for agent `name` under `base` (no empty values: it can be signed).

    It names an HTTP+JSON interface after the JSON-RPC one, as this edge's own card does: the
    tool calls only JSON-RPC, but a signature covers every interface the card was signed with."""
    return pb.AgentCard(
        name=name,
        description=f"the {name} test agent",
        version="1.0.0",
        supported_interfaces=[
            pb.AgentInterface(
                url=f"{base}/{name}/a2a", protocol_binding="JSONRPC", protocol_version="1.0"
            ),
            pb.AgentInterface(
                url=f"{base}/{name}/a2a", protocol_binding="HTTP+JSON", protocol_version="1.0"
            ),
        ],
        capabilities=pb.AgentCapabilities(streaming=False),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[pb.AgentSkill(id=name, name=name, description=f"{name} things", tags=[name])],
    )


class RemoteAgentServer:
    """The server (see the module docstring); `close()` stops it."""

    def __init__(self, key_dir: Path, certs: Certs | None = None) -> None:
        self._sock = socket.create_server(("127.0.0.1", 0))
        port = self._sock.getsockname()[1]
        self.base = f"https://localhost:{port}" if certs else f"http://127.0.0.1:{port}"
        key_path = key_dir / "echo-card-key.pem"
        key_path.write_bytes(
            private_key("ES256").private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        key = load_key(key_path)
        self.echo_key = key.kid
        signer = CardSigner([key], f"{self.base}/echo/jwks.json")
        self.callback: RemoteAgents | None = None
        self.release = threading.Event()
        routes: list[Any] = []
        signed: dict[str, Any] = {}
        for name in AGENTS:
            agent_card = card(self.base, name)
            if name == "echo":
                agent_card = signer.sign(agent_card)
                signed = MessageToDict(agent_card)
            handler = DefaultRequestHandler(
                agent_executor=Behaviour(name, self),
                task_store=InMemoryTaskStore(),
                agent_card=agent_card,
            )
            routes += create_jsonrpc_routes(handler, f"/{name}/a2a")
            routes += create_agent_card_routes(agent_card, card_url=f"/{name}/card")

        async def jwks(request: Request) -> JSONResponse:
            return JSONResponse(signer.jwks)

        async def moved(request: Request) -> RedirectResponse:
            return RedirectResponse(f"{self.base}/echo/card", status_code=302)

        async def forged(request: Request) -> JSONResponse:
            return JSONResponse({**signed, "description": "a card someone changed"})

        async def elsewhere(request: Request) -> JSONResponse:
            document = MessageToDict(card("https://elsewhere.example", "echo"))
            return JSONResponse(document)

        async def garbled_card(request: Request) -> JSONResponse:
            return JSONResponse(MessageToDict(card(self.base, "garbled")))

        async def garbled(request: Request) -> JSONResponse:
            body = await request.json()
            result = {"message": {"role": "ROLE_AGENT", "parts": [{"text": 5}]}}
            return JSONResponse({"jsonrpc": "2.0", "id": body.get("id"), "result": result})

        routes += [
            Route("/garbled/card", garbled_card),
            Route("/garbled/a2a", garbled, methods=["POST"]),
            Route("/echo/jwks.json", jwks),
            Route("/moved/card", moved),
            Route("/forged/card", forged),
            Route("/elsewhere/card", elsewhere),
        ]
        self.recorder = Recorder(Starlette(routes=routes))
        config = uvicorn.Config(
            self.recorder,
            log_level="warning",
            access_log=False,
            lifespan="off",
            ssl_certfile=str(certs.server_cert) if certs else None,
            ssl_keyfile=str(certs.server_key) if certs else None,
        )
        self._server = uvicorn.Server(config)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._started(), self._loop).result(START_TIMEOUT)

    def _run(self) -> None:
        self._loop.run_until_complete(self._server.serve(sockets=[self._sock]))

    async def _started(self) -> None:
        while not self._server.started:
            await asyncio.sleep(0.01)

    def call_back_to(self, settings: RemoteSettings) -> None:
        """Where the boomerang agent calls back: the agent `origin` of `settings`."""
        self.callback = RemoteAgents(settings, RemoteMetrics(CollectorRegistry()))

    def url(self, name: str) -> str:
        """The card URL of agent `name`."""
        return f"{self.base}/{name}/card"

    def headers(self, prefix: str) -> list[dict[str, str]]:
        """The headers of every request whose path starts with `prefix`."""
        return [headers for path, headers in self.recorder.seen if path.startswith(prefix)]

    def close(self) -> None:
        self.release.set()
        self._server.should_exit = True
        self._thread.join(START_TIMEOUT)
        with contextlib.suppress(OSError):
            self._sock.close()


@contextlib.contextmanager
def remote_agents(key_dir: Path, certs: Certs | None = None) -> Iterator[RemoteAgentServer]:
    server = RemoteAgentServer(key_dir, certs)
    try:
        yield server
    finally:
        server.close()
