"""`orrery-a2a`: run the local stack and talk to it.

    orrery-a2a up                     Envoy, authz, adapter and the dev issuer until Ctrl-C
    orrery-a2a token [--kind K]       a dev token from the running stack's issuer
    orrery-a2a ask "…"                a message through Envoy with the a2a-sdk client
    orrery-a2a approve ACTION_ID      decide a pending action as the human (--deny to refuse)
    orrery-a2a envoy-config           render envoy/envoy.yaml for other addresses (compose)

Exit codes: 0 success, 1 the operation failed (a component died, a request was refused),
2 bad usage or configuration.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from runtime.addresses import parse_address
from runtime.env import parse_duration
from runtime.errors import ConfigError
from stack import envoy_config
from stack.settings import ADDRESSES, StackSettings
from stack.state import StackError, StackState, default_state_dir
from stack.tokens import TOKEN_KINDS, TokenKind, TokenRequest, mint_for_stack

# The a2a-sdk and aiohttp take over a second to import: `ask`, `approve` and `up` import them
# when they run, so `orrery-a2a token` (often inside `$(…)`) stays quick.

MAX_TOKEN_LIFETIME_SECONDS = 24 * 3600  # authz's default ORRERY_A2A_JWT_MAX_LIFETIME


def _duration(text: str) -> int:
    try:
        seconds = int(parse_duration(text.strip(), minimum=1.0))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if seconds > MAX_TOKEN_LIFETIME_SECONDS:
        raise argparse.ArgumentTypeError("at most 24h (authz refuses longer-lived tokens)")
    return seconds


def _address(text: str) -> tuple[str, int]:
    try:
        return parse_address(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _state_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--state-dir",
        type=Path,
        help="the stack's private state directory (ORRERY_A2A_STATE_DIR; default per user)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="orrery-a2a",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    up = commands.add_parser("up", help="run the local stack until Ctrl-C")
    for variable, (flag, default) in ADDRESSES.items():
        up.add_argument(flag, dest=variable, metavar="HOST:PORT", help=f"{variable} ({default})")
    up.add_argument(
        "--replicas",
        dest="ORRERY_A2A_REPLICAS",
        metavar="N",
        help="authz and adapter processes behind Envoy (ORRERY_A2A_REPLICAS; 1); more than one"
        " needs DATABASE_URL and ORRERY_A2A_REDIS_URL",
    )
    up.add_argument(
        "--envoy-config",
        dest="ORRERY_A2A_ENVOY_CONFIG",
        metavar="PATH",
        help="the Envoy bootstrap to render (ORRERY_A2A_ENVOY_CONFIG; envoy/envoy.yaml)",
    )
    _state_option(up)

    token = commands.add_parser("token", help="print a dev token from the running stack")
    token.add_argument("--kind", choices=TOKEN_KINDS, default="delegated")
    token.add_argument("--subject", help="`sub` (default: dev-user; a service: its client id)")
    token.add_argument("--agent", help="the acting agent, `act.sub` (delegated; dev-agent)")
    token.add_argument("--client-id", help="`client_id` (a per-kind dev default)")
    token.add_argument(
        "--role",
        action="append",
        dest="roles",
        default=[],
        help="a role for the `roles` claim (repeatable; a per-kind default)",
    )
    token.add_argument("--ttl", type=_duration, default=3600, help="lifetime, e.g. 15m (1h)")
    _state_option(token)

    ask_cmd = commands.add_parser("ask", help="send a message through Envoy")
    ask_cmd.add_argument("text")
    ask_cmd.add_argument("--context-id", help="continue this conversation")
    ask_cmd.add_argument("--task-id", help="resume this task (after an approval)")
    ask_cmd.add_argument(
        "--kind",
        choices=("delegated", "service"),
        default="delegated",
        help="the kind of dev token to mint (delegated)",
    )
    ask_cmd.add_argument("--token", help="use this bearer token instead of minting one")
    ask_cmd.add_argument("--url", help="the edge's base URL (default: the running stack's)")
    _state_option(ask_cmd)

    approve_cmd = commands.add_parser("approve", help="decide a pending action as the human")
    approve_cmd.add_argument("action_id")
    approve_cmd.add_argument("--deny", action="store_true", help="refuse instead of approving")
    approve_cmd.add_argument("--token", help="a console-audience token (default: mint one)")
    approve_cmd.add_argument("--url", help="the edge's base URL (default: the running stack's)")
    _state_option(approve_cmd)

    render_cmd = commands.add_parser(
        "envoy-config", help="render the Envoy bootstrap with other addresses"
    )
    render_cmd.add_argument("--source", type=Path, default=envoy_config.repo_config_path())
    render_cmd.add_argument("--out", type=Path, help="write here (0644) instead of stdout")
    for name in ("listen", "admin", "authz", "adapter"):
        render_cmd.add_argument(f"--{name}", type=_address, metavar="HOST:PORT")

    return parser


def _env_with_flags(args: argparse.Namespace, env: Mapping[str, str]) -> dict[str, str]:
    """The environment with every given flag folded in under its variable (flags win)."""
    flags = {
        name: value
        for name, value in vars(args).items()
        if name.startswith("ORRERY_A2A_") and value is not None
    }
    merged = {**env, **flags}
    if getattr(args, "state_dir", None) is not None:
        merged["ORRERY_A2A_STATE_DIR"] = str(args.state_dir)
    return merged


def _target(args: argparse.Namespace, env: Mapping[str, str], kind: TokenKind) -> tuple[str, str]:
    """The base URL and bearer token: given by flags, else from the running stack."""
    if args.url and args.token:
        return args.url.rstrip("/"), str(args.token)
    state = StackState.load(default_state_dir(env))
    token = args.token or mint_for_stack(state, TokenRequest(kind=kind), now=int(time.time()))
    return (args.url or state.url).rstrip("/"), token


def _cmd_up(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    from stack.up import run_up

    return run_up(StackSettings.from_env(env), env, sys.stdout)


def _cmd_token(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    state = StackState.load(default_state_dir(env))
    request = TokenRequest(
        kind=args.kind,
        subject=args.subject,
        agent=args.agent,
        client_id=args.client_id,
        roles=tuple(args.roles),
        lifetime_seconds=args.ttl,
    )
    print(mint_for_stack(state, request, now=int(time.time())))
    return 0


def _cmd_ask(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    from stack.client import ask, render

    url, token = _target(args, env, args.kind)
    response = asyncio.run(
        ask(url, token, args.text, context_id=args.context_id, task_id=args.task_id)
    )
    options = "" if args.state_dir is None else f" --state-dir {shlex.quote(str(args.state_dir))}"
    reply = render(response, options)
    for line in reply.answer:
        print(line)
    for line in reply.hints:
        print(line, file=sys.stderr)
    return reply.exit_code


def _cmd_approve(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    from stack.client import approve

    url, token = _target(args, env, "human")
    print(asyncio.run(approve(url, token, args.action_id, deny=args.deny)))
    return 0


def _cmd_envoy_config(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    rendered = envoy_config.render(
        envoy_config.load(args.source),
        listen=args.listen,
        admin=args.admin,
        authz=args.authz,
        adapter=args.adapter,
    )
    if args.out is None:
        import yaml

        sys.stdout.write(yaml.safe_dump(rendered, sort_keys=False))
    else:
        envoy_config.write(rendered, args.out, mode=0o644)  # Envoy runs as another user
    return 0


COMMANDS = {
    "up": _cmd_up,
    "token": _cmd_token,
    "ask": _cmd_ask,
    "approve": _cmd_approve,
    "envoy-config": _cmd_envoy_config,
}


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    merged = _env_with_flags(args, os.environ if env is None else env)
    try:
        return COMMANDS[args.command](args, merged)
    except ConfigError as exc:
        print(f"orrery-a2a {args.command}: {exc}", file=sys.stderr)
        return 2
    except (StackError, envoy_config.EnvoyConfigError) as exc:
        # For up and envoy-config these are set-up problems (2); otherwise the request failed (1).
        print(f"orrery-a2a {args.command}: {exc}", file=sys.stderr)
        return 2 if args.command in {"up", "envoy-config"} else 1


if __name__ == "__main__":
    sys.exit(main())
