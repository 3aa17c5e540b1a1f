"""`python -m adapter`: serve until SIGTERM/SIGINT, then drain and exit 0.

Logs one JSON `serving` event with the bound address once ready (so a parent can start it on port
0), and with `ORRERY_A2A_ADAPTER_DIAG_ADDR` the diagnostics address too (`diag`: `/healthz`,
`/readyz`, `/metrics`, which then leave the A2A socket). Bad configuration prints the one
`ConfigError` (naming every bad variable) and exits 2; an address it cannot listen on is one
`startup_failed` event naming the variable, and exit 1.
"""

from __future__ import annotations

# First, before anything imports the a2a-sdk: the settings it reads when its modules load.
from adapter import sdk_presets  # noqa: F401

# isort: split

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Mapping, Sequence

from adapter.errors import GatewayLoadError
from adapter.gateway import gateway_problems
from adapter.settings import AdapterSettings
from runtime import logs
from runtime.checks import add_check_command, report
from runtime.errors import ConfigError
from runtime.serving import log_startup_failed
from runtime.version import version

logger = logging.getLogger("adapter")


CONFIGURATION = """\
configuration: environment variables only, every one listed with its default in
docs/contract.md#adapter-variables. Required: ORRERY_A2A_ASSERTION_KEYS (the same keys as authz).
The usual others: ORRERY_A2A_ADAPTER_ADDR (127.0.0.1:8081), ORRERY_A2A_PUBLIC_URL,
ORRERY_A2A_CARD_SIGNING_KEYS, ORRERY_A2A_GATEWAY, DATABASE_URL, ORRERY_A2A_REDIS_URL.

exit codes: 0 after a clean stop, 1 cannot listen (a `startup_failed` event names the variable),
2 bad configuration (one message naming every bad variable). `check` exits 0 or 2."""


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m adapter",
        description="The Orrery A2A adapter: A2A 1.0 JSON-RPC, agent cards and approvals behind"
        " Envoy, until SIGTERM or SIGINT.",
        epilog=CONFIGURATION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    add_check_command(commands, untouched="listening or connecting anywhere")
    return parser.parse_args(argv)


def check(env: Mapping[str, str]) -> list[str]:
    """Every problem a start would meet before serving: the settings, and the gateway's
    `module:factory` with its own `check` (imported, not built: building may open connections)."""
    try:
        settings = AdapterSettings.from_env(env)
    except ConfigError as exc:
        return exc.problems
    return gateway_problems(settings.gateway, env)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)  # --help and --version answer before any configuration is read
    if args.command == "check":
        return report("adapter", check(os.environ), as_json=args.json)
    try:
        settings = AdapterSettings.from_env(os.environ)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    logs.configure(settings.log_level)
    # Only a start loads the serving machinery (aiohttp, the SDK's request handlers): `check`,
    # which `orrery-a2a up` runs before every start (and `orrery-a2a check` runs), costs half the
    # CPU of a start.
    from adapter import sdk_tracing
    from adapter.serving import serve

    sdk_tracing.unwrap()
    try:
        asyncio.run(serve(settings))
    except (ConfigError, GatewayLoadError) as exc:
        print(exc, file=sys.stderr)
        return 2
    except OSError as exc:
        log_startup_failed(logger, exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
