"""The baseline for `adapter_bench.py`: the a2a-sdk's own Starlette JSON-RPC server under uvicorn.

It wraps exactly what the adapter wraps — `GatewayExecutor` over the embedded demo gateway — with
the SDK's stock pieces (`create_jsonrpc_routes`, `create_agent_card_routes`, `InMemoryTaskStore`),
and no authentication: every request runs as one fixed principal. Binds 127.0.0.1:0 and prints
`{"port": N}` on stdout once listening.
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys

import uvicorn
from a2a.auth.user import User
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.routes.common import DefaultServerCallContextBuilder
from a2a.server.tasks import InMemoryTaskStore
from starlette.applications import Starlette
from starlette.requests import Request

from adapter.card import public_card
from adapter.executor import GatewayExecutor
from adapter.principal import PrincipalUser
from adapter.settings import CardAuth
from adapter.stores.memory import MemoryConfirmationStore
from contract.identity import DEFAULT_ROLE_AUTONOMY, Principal, parse_role_autonomy
from gateways.demo import DemoGateway

PRINCIPAL = Principal(
    kind="delegated", subject="bench", client="bench", agent="bench", role="admin", autonomy="L3"
)


class FixedPrincipal(DefaultServerCallContextBuilder):
    """No authentication: the stock server with one caller."""

    def build_user(self, request: Request) -> User:
        return PrincipalUser(PRINCIPAL)


async def main() -> None:
    sock = socket.create_server(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/a2a"
    roles = tuple(role for role, _ in parse_role_autonomy(DEFAULT_ROLE_AUTONOMY))
    card = public_card(url, CardAuth(roles=roles))  # the adapter's card with default settings
    handler = DefaultRequestHandler(
        agent_executor=GatewayExecutor(DemoGateway(MemoryConfirmationStore(), 900.0), url),
        task_store=InMemoryTaskStore(),
        agent_card=card,
    )
    app = Starlette(
        routes=[
            *create_jsonrpc_routes(handler, "/a2a", context_builder=FixedPrincipal()),
            *create_agent_card_routes(card),
        ]
    )
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
    server = uvicorn.Server(config)
    print(json.dumps({"port": port}), flush=True)
    await server.serve(sockets=[sock])


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
