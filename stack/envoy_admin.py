"""Make Envoy stop accepting, through its admin API: the first step of every ordered stop.

`python -m stack.envoy_admin stop-accepting ADMIN [--settle SECONDS]`, and `stop_accepting()` for
`orrery-a2a up`. ADMIN is where the admin API listens: the absolute path of its Unix socket (the
local stack's, in its state directory: no other local user may quit or drain the edge) or host:port
(a pod's loopback, shared only by the pod's containers). Two admin calls: `POST /healthcheck/fail`
— Envoy's readiness (`/ready`, the diagnostics listener's `/readyz`) fails, and open downstream
connections are drained (`Connection: close` on HTTP/1.1, GOAWAY on HTTP/2) — then, after `settle`
seconds, `POST /drain_listeners` — the listeners close, so no new connection is accepted. Requests
and streams already open go on: the adapter behind Envoy can still end its streams with their final
events (docs/operations.md#stopping-in-order).

The settle time is for a pod: the Service's endpoints, kube-proxy and load balancers learn of a
terminating pod a moment later, and what they still send meanwhile should find the listener
open. The local stack has nothing in front and settles 0 s. A module of its own, not an
`orrery-a2a` command, so a pod's preStop hook imports little.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

import aiohttp

ADMIN_TIMEOUT_SECONDS = 2.0
SOCKET_HOST = "http://envoy-admin"  # the Host of requests over the Unix socket (Envoy ignores it)


def admin_session(admin: str, *, timeout: float = ADMIN_TIMEOUT_SECONDS) -> aiohttp.ClientSession:
    """A session whose requests (`session.get("/ready")`) go to the admin API at `admin`: an
    absolute path is its Unix socket, anything else host:port."""
    client_timeout = aiohttp.ClientTimeout(total=timeout)
    if admin.startswith("/"):
        connector = aiohttp.UnixConnector(path=admin)
        return aiohttp.ClientSession(SOCKET_HOST, connector=connector, timeout=client_timeout)
    return aiohttp.ClientSession(f"http://{admin}", timeout=client_timeout)


async def stop_accepting(admin: str, *, settle: float = 0.0) -> None:
    """Fail Envoy's health at `admin` (a socket path or host:port), wait `settle` seconds, close
    its listeners; raises `aiohttp.ClientError` when the admin API does not do it."""
    async with admin_session(admin) as session:
        for path, wait in (("/healthcheck/fail", settle), ("/drain_listeners", 0.0)):
            async with session.post(path) as response:
                response.raise_for_status()
            await asyncio.sleep(wait)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m stack.envoy_admin",
        description="Make Envoy stop accepting (a preStop hook's first step of an ordered stop).",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    stop = commands.add_parser("stop-accepting", help="fail Envoy's health, then close listeners")
    stop.add_argument(
        "admin",
        help="where Envoy's admin API listens: its Unix socket's absolute path, or host:port"
        " (loopback)",
    )
    stop.add_argument(
        "--settle",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="seconds between failing health and closing the listeners (0)",
    )
    args = parser.parse_args(argv)
    try:
        asyncio.run(stop_accepting(args.admin, settle=args.settle))
    except (aiohttp.ClientError, TimeoutError) as exc:
        print(f"envoy admin {args.admin}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(f"envoy admin {args.admin}: not accepting")
    return 0


if __name__ == "__main__":
    sys.exit(main())
