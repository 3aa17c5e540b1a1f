"""`python -m authz [--workers N]` — serve Check until SIGTERM/SIGINT, then exit 0.

`python -m authz check` checks the environment without serving (`runtime.checks`);
`python -m authz explain [TOKEN]` says what authz would decide for a token (`authz.explain`).

Exit codes: 0 after a clean stop, 2 for bad configuration (one message naming every bad
variable), 1 when the service cannot run (address in use, a worker died).

Once listening it logs one `serving` event with the real addresses (port 0 picks free ports):
`{"event": "serving", "grpc": "127.0.0.1:PORT", "diag": "127.0.0.1:PORT", "workers": N, …}`
(`diag`: the diagnostics address, `/healthz`, `/readyz`, `/metrics`; `http`: the HTTP ext_authz
transport's address when ORRERY_A2A_AUTHZ_HTTP_ADDR is set, else null).

With `--workers N` (N > 1) N processes share the gRPC port and the HTTP one (see
`authz.workers`). Each worker has its own key store and token cache; the in-process rate limiter
cannot be shared between processes, so N > 1 requires `ORRERY_A2A_REDIS_URL`.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import os
import sys
from collections.abc import Mapping, Sequence

from authz import explain
from authz.jwks import JwksError, parse_jwks
from authz.server import Bound, configure_logging, process_logger, run
from authz.settings import AuthzSettings
from authz.workers import WorkerDied, run_workers
from runtime import logs
from runtime.checks import add_check_command, report
from runtime.errors import ConfigError
from runtime.serving import log_serving, log_startup_failed
from runtime.version import version


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m authz", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--workers", type=int, default=1, help="processes sharing the gRPC port (default 1)"
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    add_check_command(commands, untouched="listening or fetching anything")
    explain_cmd = commands.add_parser(
        "explain",
        help="what authz would decide for a token on each surface, and why (offline, with the"
        " configured JWKS)",
    )
    explain_cmd.add_argument(
        "token",
        nargs="?",
        metavar="TOKEN",
        help="`-` or absent: stdin or ORRERY_A2A_TOKEN (a token given here is visible in `ps`)",
    )
    explain_cmd.add_argument("--json", action="store_true", help="one JSON object on stdout")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "check":
        return report("authz", check(os.environ, args.workers), as_json=args.json)
    if args.command == "explain":
        return _explain(args)
    try:
        settings = load_settings(os.environ, args.workers)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    configure_logging(settings.log_level)
    try:
        if args.workers == 1:
            asyncio.run(run(settings, _log_serving))
        else:
            run_workers(settings, args.workers)
    except OSError as exc:
        log_startup_failed(process_logger, exc)
        return 1
    except WorkerDied as exc:
        logs.event(process_logger, "worker_died", logging.ERROR, exitcode=exc.exitcode)
        return 1
    logs.event(process_logger, "stopped")
    return 0


def load_settings(env: Mapping[str, str], workers: int) -> AuthzSettings:
    """Settings plus the `--workers` rule, reported together as one `ConfigError`."""
    problems: list[str] = []
    settings: AuthzSettings | None = None
    try:
        settings = AuthzSettings.from_env(env)
    except ConfigError as exc:
        problems = list(exc.problems)
    if workers < 1:
        problems.append("--workers: must be at least 1")
    elif workers > 1 and not env.get("ORRERY_A2A_REDIS_URL", "").strip():
        problems.append(
            "ORRERY_A2A_REDIS_URL: required with --workers > 1 "
            "(each worker would otherwise enforce its own rate limit)"
        )
    if problems or settings is None:
        raise ConfigError(problems)
    return settings


def _explain(args: argparse.Namespace) -> int:
    logs.configure("WARNING")  # a JWKS that does not load is worth a line on stderr
    try:
        return explain.run(args, os.environ, sys.stdin, sys.stdout)
    except (ConfigError, explain.NoToken) as exc:
        explain.write_error(str(exc))
        return 2


def check(env: Mapping[str, str], workers: int) -> list[str]:
    """Every problem a start would meet before serving: the settings with the `--workers` rule,
    and a JWKS file that cannot be read or holds no usable key (a URL is not fetched)."""
    try:
        settings = load_settings(env, workers)
    except ConfigError as exc:
        return list(exc.problems)
    if settings.jwks.file is None:
        return []
    try:
        parse_jwks(settings.jwks.file.read_bytes())
    except OSError as exc:
        return [f"ORRERY_A2A_JWKS_FILE: cannot read {settings.jwks.file}: {exc.strerror}"]
    except JwksError as exc:
        return [f"ORRERY_A2A_JWKS_FILE: {exc}"]
    return []


def _log_serving(bound: Bound) -> None:
    log_serving(process_logger, workers=1, **dataclasses.asdict(bound))


if __name__ == "__main__":
    sys.exit(main())
