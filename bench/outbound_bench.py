"""The remote-agent tool's cost per call against the plain a2a-sdk client, same server, same run.

    .venv/bin/python bench/outbound_bench.py [--calls 200] [--rounds 5]

A stock a2a-sdk Starlette JSON-RPC server under uvicorn (an echo agent answering one text
message, its card unsigned) listens on loopback in this process. Each round times `--calls`
sequential calls of each client, interleaved:

* `sdk-fresh` — the a2a-sdk client built per call as the tool builds it (a new
  `httpx.AsyncClient` on one shared TLS context, a new client from `ClientFactory.create(card)`,
  one `SendMessage`), without any of the tool's checks: the baseline;
* `sdk-kept` — one HTTP client and SDK client for the whole round (keep-alive), for reference;
* `tool` — `RemoteAgents.call` (gateways/remote/client.py): per call, the guarded transport
  (address check, hop header, byte cap), a fresh HTTP client and SDK client, and the screening;
  its card is fetched once and pinned, as in production.

Prints the median milliseconds per call of each, and the ratio tool / sdk-fresh per round and its
median. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import time
import uuid

import httpx
import uvicorn
from a2a.client import ClientConfig, ClientFactory
from a2a.helpers import new_text_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore
from a2a.types import a2a_pb2 as pb
from prometheus_client import CollectorRegistry
from starlette.applications import Starlette

from gateways.remote.client import RemoteAgents
from gateways.remote.metrics import RemoteMetrics
from gateways.remote.settings import RemoteSettings


class Echo(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        text = context.message.parts[0].text if context.message else ""
        reply = new_text_message(
            f"echo: {text}", context_id=context.context_id, task_id=context.task_id
        )
        await event_queue.enqueue_event(reply)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        raise NotImplementedError


def echo_card(base: str) -> pb.AgentCard:
    interface = pb.AgentInterface(
        url=f"{base}/a2a", protocol_binding="JSONRPC", protocol_version="1.0"
    )
    return pb.AgentCard(
        name="echo",
        description="echo",
        version="1",
        supported_interfaces=[interface],
        capabilities=pb.AgentCapabilities(streaming=False),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[pb.AgentSkill(id="echo", name="echo", description="echo", tags=["echo"])],
    )


def message(text: str) -> pb.SendMessageRequest:
    return pb.SendMessageRequest(
        message=pb.Message(
            role=pb.Role.ROLE_USER, message_id=uuid.uuid4().hex, parts=[pb.Part(text=text)]
        )
    )


async def send(http: httpx.AsyncClient, card: pb.AgentCard, text: str) -> None:
    client = ClientFactory(ClientConfig(httpx_client=http, streaming=False)).create(card)
    async for _ in client.send_message(message(text)):
        pass


async def time_sdk_fresh(card: pb.AgentCard, calls: int) -> float:
    tls = httpx.create_ssl_context(trust_env=False)
    started = time.perf_counter()
    for index in range(calls):
        async with httpx.AsyncClient(timeout=30, verify=tls, trust_env=False) as http:
            await send(http, card, f"call {index}")
    return (time.perf_counter() - started) / calls


async def time_sdk_kept(card: pb.AgentCard, calls: int) -> float:
    async with httpx.AsyncClient(timeout=30) as http:
        started = time.perf_counter()
        for index in range(calls):
            await send(http, card, f"call {index}")
        return (time.perf_counter() - started) / calls


async def time_tool(remote: RemoteAgents, calls: int) -> float:
    started = time.perf_counter()
    for index in range(calls):
        await remote.call("echo", f"call {index}", principal_key="bench")
    return (time.perf_counter() - started) / calls


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    sock = socket.create_server(("127.0.0.1", 0))
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    card = echo_card(base)
    handler = DefaultRequestHandler(
        agent_executor=Echo(), task_store=InMemoryTaskStore(), agent_card=card
    )
    app = Starlette(
        routes=[*create_jsonrpc_routes(handler, "/a2a"), *create_agent_card_routes(card)]
    )
    server = uvicorn.Server(
        uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
    )
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        await asyncio.sleep(0.01)
    settings = RemoteSettings.from_env(
        {
            "ORRERY_A2A_REMOTE_AGENTS": f"echo={base}/.well-known/agent-card.json",
            "ORRERY_A2A_REMOTE_ALLOW_NETWORKS": "127.0.0.0/8",
            "ORRERY_A2A_REMOTE_MAX_CALLS_PER_PRINCIPAL": "1",
        }
    )
    remote = RemoteAgents(settings, RemoteMetrics(CollectorRegistry()))
    await remote.call("echo", "warm-up", principal_key="bench")  # fetch and pin the card
    await time_sdk_fresh(card, 5)
    fresh, kept, tool = [], [], []
    for _ in range(args.rounds):
        fresh.append(await time_sdk_fresh(card, args.calls))
        kept.append(await time_sdk_kept(card, args.calls))
        tool.append(await time_tool(remote, args.calls))
    ratios = [t / f for t, f in zip(tool, fresh, strict=True)]
    for name, values in (("sdk-fresh", fresh), ("sdk-kept", kept), ("tool", tool)):
        print(f"{name:9} {statistics.median(values) * 1000:.2f} ms/call (median of {args.rounds})")
    print("ratio tool/sdk-fresh per round: " + ", ".join(f"{r:.2f}" for r in ratios))
    print(f"ratio tool/sdk-fresh median: {statistics.median(ratios):.2f}")
    server.should_exit = True
    await serving


if __name__ == "__main__":
    asyncio.run(main())
