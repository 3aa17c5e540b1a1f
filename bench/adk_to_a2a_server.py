"""The `to_a2a()` baseline for `adk_bench.py`: the example ADK agent (scripted model) served by
ADK's own `to_a2a()` on uvicorn, as its docstring shows. Binds 127.0.0.1:0 and prints
`{"port": N}` on stdout once listening.
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys

import uvicorn
from google.adk.a2a.utils.agent_to_a2a import to_a2a

from gateways.adk.example import ScriptedModel, build_agent


async def main() -> None:
    sock = socket.create_server(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    app = to_a2a(build_agent(ScriptedModel()), host="127.0.0.1", port=port)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    print(json.dumps({"port": port}), flush=True)
    await server.serve(sockets=[sock])


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
