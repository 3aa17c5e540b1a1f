"""The dev token issuer: serves the run's public key as a JWKS, on loopback only.

authz fetches `GET /.well-known/jwks.json` exactly as it would from a real identity provider, so
the local stack exercises the production key path (fetch, cache, `kid` lookup). Tokens are minted
by `orrery-a2a token` from the private key in the stack's private state directory; this server
never signs anything, so there is no endpoint that hands out tokens to whoever can connect.

It refuses to bind anything but a loopback address: a dev issuer reachable from the network would
let anyone who learns its keys' origin trust tokens from it. Run with
`python -m stack.issuer --key PATH --addr 127.0.0.1:8090`; it logs a JSON `serving` event with
the bound address and issuer string once ready (or one `startup_failed` event naming
ORRERY_A2A_ISSUER_ADDR, `up --issuer`, when the address is taken, and exits 1), and stops cleanly
on SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aiohttp import web

from runtime import logs
from runtime.addresses import Address, format_address, parse_address
from runtime.serving import cannot_listen, log_serving, log_startup_failed
from stack.addresses import require_loopback
from stack.keys import load_signing_key, public_jwk

JWKS_PATH = "/.well-known/jwks.json"
log = logging.getLogger("stack.issuer")


def issuer_url(address: Address) -> str:
    return f"http://{format_address(address)}"


def create_app(jwks: dict[str, Any]) -> web.Application:
    body = json.dumps(jwks).encode()

    async def serve_jwks(_: web.Request) -> web.Response:
        return web.Response(
            body=body,
            content_type="application/json",
            headers={"Cache-Control": "public, max-age=300"},
        )

    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    app = web.Application()
    app.router.add_get(JWKS_PATH, serve_jwks)
    app.router.add_get("/healthz", healthz)
    return app


async def serve(key_path: Path, address: Address) -> None:
    """Serve until SIGTERM/SIGINT; log `serving` with the bound address first."""
    host, port = address
    require_loopback(host)
    jwks = {"keys": [public_jwk(load_signing_key(key_path))]}
    runner = web.AppRunner(create_app(jwks), access_log=None, handle_signals=False)
    await runner.setup()
    try:
        try:
            await web.TCPSite(runner, host, port).start()
        except OSError as exc:
            raise cannot_listen("ORRERY_A2A_ISSUER_ADDR", address, exc) from None
        bound_host, bound_port = runner.addresses[0][:2]
        bound = (str(bound_host), int(bound_port))
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        # Only now: whoever reads `serving` may send SIGTERM at once and expect exit 0.
        log_serving(log, addr=format_address(bound), issuer=issuer_url(bound))
        await stop.wait()
    finally:
        await runner.cleanup()
    logs.event(log, "stopped")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stack.issuer", description=__doc__)
    parser.add_argument("--key", type=Path, required=True, help="PEM P-256 private key")
    parser.add_argument("--addr", default="127.0.0.1:8090", help="loopback host:port (port 0 ok)")
    args = parser.parse_args(argv)
    logs.configure()
    try:
        address = parse_address(args.addr)
        require_loopback(address[0])
        load_signing_key(args.key)
    except (ValueError, OSError) as exc:
        print(f"orrery dev issuer: {exc}", file=sys.stderr)
        return 2
    try:
        asyncio.run(serve(args.key, address))
    except OSError as exc:
        log_startup_failed(log, exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
