"""`orrery-a2a`: run the local stack and talk to it.

    orrery-a2a up                     Envoy, authz, adapter and the dev issuer until Ctrl-C
    orrery-a2a check                  every problem `up` would meet, before starting anything
    orrery-a2a token [--kind K]       a dev token from the running stack's issuer
    orrery-a2a ask "…"                a message through Envoy with the a2a-sdk client
    orrery-a2a approve ACTION_ID      decide a pending action as the human (--deny to refuse)
    orrery-a2a explain [TOKEN]        what authz would decide for a token, and why
    orrery-a2a envoy-config           render envoy/envoy.yaml for other addresses (compose)

Exit codes: 0 success, 1 the operation failed (a component died, a request was refused),
2 bad usage or configuration.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import re
import shlex
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NoReturn, TextIO
from urllib.parse import urlsplit

from runtime.addresses import parse_address
from runtime.env import EnvReader, parse_duration
from runtime.errors import ConfigError
from runtime.version import version
from stack import envoy_config
from stack.children import python_module
from stack.edge_policy import EdgePolicy
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


def _port(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (1-65535)")
    return int(text)


def _state_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--state-dir",
        type=Path,
        help="the stack's private state directory (ORRERY_A2A_STATE_DIR; default per user)",
    )


# The ADK gateway's factory, by name: the stack never imports a gateway (the adapter loads it).
ADK_GATEWAY = "gateways.adk:create"
TOKEN_VARIABLE = "ORRERY_A2A_TOKEN"  # noqa: S105 - the variable's name, not a secret
STDIN = "-"
# A compact JWS: three base64url segments, the first a JSON object (`{"` encodes as `eyJ`). What
# an error message must never echo; host names and versions do not match.
_JWS = re.compile(r"eyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*")


TLS_OPTIONS = (
    ("--tls-cert", "ORRERY_A2A_TLS_CERT", "TLS on Envoy's listener: the PEM chain"),
    ("--tls-key", "ORRERY_A2A_TLS_KEY", "its PEM private key"),
    ("--client-ca", "ORRERY_A2A_TLS_CLIENT_CA", "mTLS: the PEM CA of client certificates"),
)


def _tls_options(parser: argparse.ArgumentParser, where: str = "") -> None:
    """The TLS flags, each standing for its variable (so compose can set them by environment)."""
    for flag, variable, text in TLS_OPTIONS:
        suffix = f" {where}" if where else ""
        parser.add_argument(
            flag, dest=variable, metavar="PATH", help=f"{text}{suffix} ({variable})"
        )


def redact(text: str) -> str:
    """`text` with anything shaped like a token replaced: a mistyped command line or a failure
    message is printed, and a token in it would land in terminals, logs and bug reports."""
    return _JWS.sub("[redacted token]", text)


class _Parser(argparse.ArgumentParser):
    """argparse, except that a usage error never echoes a token given in the wrong place."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {redact(message)}\n")


def _base_url(text: str) -> str:
    """`--url`: the edge's base URL, where its agent card is; never the /a2a endpoint itself."""
    parts = urlsplit(text.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an http(s) URL; give the edge's base URL with its scheme,"
            " e.g. http://127.0.0.1:8080"
        )
    if parts.query or parts.fragment:
        raise argparse.ArgumentTypeError("the edge's base URL has no query or fragment")
    path = parts.path.rstrip("/")
    for endpoint in ("/a2a", "/.well-known/agent-card.json"):
        if path.endswith(endpoint):
            base = f"{parts.scheme}://{parts.netloc}{path.removesuffix(endpoint)}"
            raise argparse.ArgumentTypeError(
                f"{text} names an endpoint; give the edge's base URL, {base}: the agent card"
                f" served there (/.well-known/agent-card.json) names the A2A endpoint"
            )
    return f"{parts.scheme}://{parts.netloc}{path}"


def _credential_options(parser: argparse.ArgumentParser, minted: str) -> None:
    """Where a command's bearer token comes from; argv only on request (`ps` shows it)."""
    given = parser.add_mutually_exclusive_group()
    given.add_argument(
        "--token-file",
        metavar="PATH",
        help=f"read the bearer token from PATH, `-` for stdin (else {TOKEN_VARIABLE}, else"
        f" {minted})",
    )
    given.add_argument(
        "--token",
        metavar="TOKEN",
        help="the bearer token itself; other users see it in `ps`: prefer --token-file or"
        f" {TOKEN_VARIABLE}",
    )


def _stack_options(parser: argparse.ArgumentParser) -> None:
    """The options of `up` and `check`: each the variable it stands for (the flag wins)."""
    for variable, (flag, default) in ADDRESSES.items():
        parser.add_argument(
            flag, dest=variable, metavar="HOST:PORT", help=f"{variable} ({default})"
        )
    parser.add_argument(
        "--replicas",
        dest="ORRERY_A2A_REPLICAS",
        metavar="N",
        help="authz and adapter processes behind Envoy (ORRERY_A2A_REPLICAS; 1); more than one"
        " needs DATABASE_URL and ORRERY_A2A_REDIS_URL",
    )
    _transport_option(parser, "; http serves checks on --authz-http")
    _edge_policy_options(parser)
    _tls_options(parser)
    parser.add_argument(
        "--envoy-config",
        dest="ORRERY_A2A_ENVOY_CONFIG",
        metavar="PATH",
        help="the Envoy bootstrap to render (ORRERY_A2A_ENVOY_CONFIG; envoy/envoy.yaml)",
    )
    parser.add_argument(
        "--adk-agent",
        dest="ORRERY_A2A_ADK_AGENT",
        metavar="MODULE:ATTR",
        help="serve this ADK agent (ORRERY_A2A_ADK_AGENT) through the ADK gateway (sets"
        f" ORRERY_A2A_GATEWAY={ADK_GATEWAY}; needs the `adk` extra)",
    )
    _state_option(parser)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="orrery-a2a",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    up = commands.add_parser("up", help="check, then run the local stack until Ctrl-C")
    _stack_options(up)
    check_cmd = commands.add_parser(
        "check",
        help="check the stack's, authz's and the adapter's environment and the Envoy bootstrap,"
        " as `up` would start them; list every problem (exit 0 or 2), start nothing",
    )
    _stack_options(check_cmd)

    token = commands.add_parser("token", help="print a dev token from the running stack")
    token.add_argument(
        "--kind",
        choices=TOKEN_KINDS,
        default="delegated",
        help="an agent acting for a person, a service on its own behalf, or the person at the"
        " approvals console (delegated)",
    )
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
    ask_cmd.add_argument("text", help="the message, as plain text")
    ask_cmd.add_argument("--context-id", help="continue this conversation")
    ask_cmd.add_argument("--task-id", help="resume this task (after an approval)")
    ask_cmd.add_argument(
        "--kind",
        choices=("delegated", "service"),
        default="delegated",
        help="the kind of dev token to mint when none is given (delegated)",
    )
    _credential_options(ask_cmd, "a dev token minted from the running stack")
    ask_cmd.add_argument(
        "--url",
        type=_base_url,
        help="the edge's base URL, where its agent card is (default: the running stack's); the"
        " card's interface URL, not this, decides where the message goes",
    )
    _state_option(ask_cmd)

    approve_cmd = commands.add_parser("approve", help="decide a pending action as the human")
    approve_cmd.add_argument(
        "action_id", help="the action `ask` printed (after `--` if it starts with `-`)"
    )
    approve_cmd.add_argument("--deny", action="store_true", help="refuse instead of approving")
    _credential_options(approve_cmd, "a console-audience dev token minted from the running stack")
    approve_cmd.add_argument(
        "--url",
        type=_base_url,
        help="the edge's base URL (default: the running stack's); the decision goes to"
        " URL/approvals/ACTION_ID",
    )
    _state_option(approve_cmd)

    explain_cmd = commands.add_parser(
        "explain",
        help="what authz would decide for a token on each surface, and why: the running stack's"
        " authz configuration, offline (`python -m authz explain` in production)",
    )
    explain_cmd.add_argument(
        "token",
        nargs="?",
        metavar="TOKEN",
        help=f"`-` or absent: stdin or {TOKEN_VARIABLE} (a token given here is visible in `ps`)",
    )
    explain_cmd.add_argument("--json", action="store_true", help="one JSON object on stdout")
    _state_option(explain_cmd)

    render_cmd = commands.add_parser(
        "envoy-config", help="render the Envoy bootstrap with other addresses"
    )
    render_cmd.add_argument(
        "--source",
        type=Path,
        default=envoy_config.repo_config_path(),
        help="the bootstrap to render (envoy/envoy.yaml of this checkout)",
    )
    render_cmd.add_argument("--out", type=Path, help="write here (0644) instead of stdout")
    for name, what in (
        ("listen", "the public listener"),
        ("admin", "the admin API (keep it on loopback)"),
        ("authz", "the authz cluster's endpoint"),
        ("authz-http", "the authz cluster's endpoint with --authz-transport http (else unused)"),
        ("adapter", "the adapter cluster's endpoint"),
        ("diag", "the diagnostics listener (/healthz, /readyz, /metrics)"),
    ):
        render_cmd.add_argument(
            f"--{name}", type=_address, metavar="HOST:PORT", help=f"{what} (unchanged if absent)"
        )
    _transport_option(render_cmd, "; --authz then names authz's HTTP transport")
    render_cmd.add_argument(
        "--adapter-health-port",
        type=_port,
        metavar="PORT",
        help="where Envoy's health check asks the adapter's /readyz, when the adapter serves it"
        " on a diagnostics address instead of the A2A port (default: the port of"
        " ORRERY_A2A_ADAPTER_DIAG_ADDR when set)",
    )
    _edge_policy_options(render_cmd)
    _tls_options(render_cmd, "(where Envoy reads it)")
    render_cmd.add_argument(
        "--tls-reload",
        dest="ORRERY_A2A_TLS_RELOAD",
        metavar="BOOL",
        help="serve a rotated certificate without a restart: Envoy takes the TLS files through"
        " SDS resource files written beside --out, which watch the files' directory"
        " (ORRERY_A2A_TLS_RELOAD, true/false)",
    )

    return parser


def _transport_option(parser: argparse.ArgumentParser, more: str = "") -> None:
    parser.add_argument(
        "--authz-transport",
        dest="ORRERY_A2A_AUTHZ_TRANSPORT",
        choices=envoy_config.AUTHZ_TRANSPORTS,
        help=f"how Envoy asks authz (ORRERY_A2A_AUTHZ_TRANSPORT; grpc{more})",
    )


def _edge_policy_options(parser: argparse.ArgumentParser) -> None:
    """What `stack.edge_policy` reads, as flags that win over their variables."""
    for flag, variable, metavar, text in (
        (
            "--cors-origins",
            "ORRERY_A2A_CORS_ORIGINS",
            "ORIGINS",
            "browser origins, comma-separated, or *",
        ),
        (
            "--client-rate-limit",
            "ORRERY_A2A_CLIENT_RATE_LIMIT",
            "RATE",
            "per client address, e.g. 100/second",
        ),
        (
            "--client-rate-burst",
            "ORRERY_A2A_CLIENT_RATE_BURST",
            "N",
            "requests at once per client address",
        ),
        ("--max-heap", "ORRERY_A2A_ENVOY_MAX_HEAP", "SIZE", "Envoy's heap budget, e.g. 512MiB"),
        (
            "--xff-trusted-hops",
            "ORRERY_A2A_XFF_TRUSTED_HOPS",
            "N",
            "proxies in front that append to X-Forwarded-For (the client is N from the right)",
        ),
        (
            "--proxy-protocol",
            "ORRERY_A2A_PROXY_PROTOCOL",
            "BOOL",
            "the load balancer in front sends the PROXY protocol header (true/false)",
        ),
    ):
        parser.add_argument(flag, dest=variable, metavar=metavar, help=f"{text} ({variable})")


def _env_with_flags(args: argparse.Namespace, env: Mapping[str, str]) -> dict[str, str]:
    """The environment with every given flag folded in under its variable (flags win);
    `--adk-agent` also selects the ADK gateway."""
    flags = {
        name: value
        for name, value in vars(args).items()
        if name.startswith("ORRERY_A2A_") and value is not None
    }
    if "ORRERY_A2A_ADK_AGENT" in flags:
        flags["ORRERY_A2A_GATEWAY"] = ADK_GATEWAY
    merged = {**env, **flags}
    if getattr(args, "state_dir", None) is not None:
        merged["ORRERY_A2A_STATE_DIR"] = str(args.state_dir)
    return merged


def given_token(args: argparse.Namespace, env: Mapping[str, str], stdin: TextIO) -> str | None:
    """The bearer token the user gave: `--token`, `--token-file` (`-`: stdin) or
    ORRERY_A2A_TOKEN, in that order; None when none was given. Never echoed in an error."""
    if args.token:
        return str(args.token).strip()
    if args.token_file:
        path: str = args.token_file
        source = "stdin" if path == "-" else path
        try:
            text = stdin.read() if path == "-" else Path(path).read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise StackError(f"cannot read a token from {source}: {exc}") from None
        token = text.strip()
        if not token or len(token.split()) != 1:
            raise StackError(f"{source} does not hold one token")
        return token
    return env.get(TOKEN_VARIABLE, "").strip() or None


def _target(args: argparse.Namespace, env: Mapping[str, str], kind: TokenKind) -> tuple[str, str]:
    """The base URL and bearer token: given by flags or ORRERY_A2A_TOKEN, else from the running
    stack (its URL, a dev token of `kind` minted from its issuer key)."""
    token = given_token(args, env, sys.stdin)
    if args.url and token:
        return args.url, token
    state = StackState.load(default_state_dir(env))
    token = token or mint_for_stack(state, TokenRequest(kind=kind), now=int(time.time()))
    return (args.url or state.url).rstrip("/"), token


def _checked(env: Mapping[str, str], command: str) -> tuple[bool, list[str]]:
    """Whether `check` found nothing, and the lines it prints."""
    from stack.check import check_stack, render

    problems = asyncio.run(check_stack(env))
    return not problems, render(problems, command)


def _cmd_check(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    ok, lines = _checked(env, "check")
    print("\n".join(lines))
    return 0 if ok else 2


def _cmd_up(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    """`check` first: a stack that cannot work never half-starts."""
    from stack.up import run_up

    ok, lines = _checked(env, "up")
    if not ok:
        print("\n".join(lines), file=sys.stderr)
        return 2
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


def _cmd_explain(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    """`python -m authz explain` with the running stack's authz configuration: the stack never
    imports authz (tests/test_layering.py), it runs authz's own explanation. The token reaches
    it by stdin or the environment, never by argv."""
    import subprocess

    from stack.keys import new_assertion_keys
    from stack.wiring import Wiring, authz_env, child_env

    state = StackState.load(default_state_dir(env))
    wiring = Wiring(state.issuer, new_assertion_keys(), public_url=f"{state.url}/a2a")
    child = child_env(env, authz_env(StackSettings.from_env(env), wiring))
    child |= {
        "ORRERY_A2A_JWT_AUDIENCE": state.audience,
        "ORRERY_CONSOLE_JWT_AUDIENCE": state.console_audience,
    }
    argv = [*python_module("authz"), "explain", *(["--json"] if args.json else [])]
    given: str | None = args.token
    from_stdin = given == STDIN
    if from_stdin:
        argv.append(STDIN)
    elif given or env.get(TOKEN_VARIABLE):
        child[TOKEN_VARIABLE] = given or env[TOKEN_VARIABLE]
    return subprocess.run(argv, env=child, check=False).returncode  # noqa: S603 - our authz


def _tls_files(env: Mapping[str, str]) -> envoy_config.TlsFiles | None:
    """From the flags or their variables (empty is unset): certificate and key together, a client
    CA only on top. The files need not exist here: they are where Envoy will read them."""
    cert, key, client_ca = (env.get(variable) or None for _, variable, _ in TLS_OPTIONS)
    if cert is None and key is None:
        if client_ca is not None:
            raise ConfigError(["--client-ca: needs --tls-cert and --tls-key (mTLS is TLS first)"])
        return None
    if cert is None or key is None:
        raise ConfigError(["--tls-cert, --tls-key: give both or neither"])
    return envoy_config.TlsFiles(Path(cert), Path(key), Path(client_ca) if client_ca else None)


def _authz_transport(env: Mapping[str, str]) -> envoy_config.AuthzTransport:
    try:
        return envoy_config.parse_authz_transport(env.get("ORRERY_A2A_AUTHZ_TRANSPORT") or "grpc")
    except ValueError as exc:
        raise ConfigError([f"ORRERY_A2A_AUTHZ_TRANSPORT: {exc}"]) from None


def _adapter_health_port(args: argparse.Namespace, env: Mapping[str, str]) -> int | None:
    """The flag, else the port of the adapter's diagnostics address (compose passes it), else
    None: /readyz is on the A2A port."""
    if args.adapter_health_port is not None:
        return int(args.adapter_health_port)
    diag = env.get("ORRERY_A2A_ADAPTER_DIAG_ADDR")
    if not diag:
        return None
    try:
        return parse_address(diag)[1]
    except ValueError as exc:
        raise ConfigError([f"ORRERY_A2A_ADAPTER_DIAG_ADDR: {exc}"]) from None


def _cmd_envoy_config(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    transport = _authz_transport(env)
    authz = args.authz
    if transport == "http":
        authz = args.authz_http or args.authz
        if authz is None:  # the file's endpoint is authz's gRPC port
            raise ConfigError(
                ["--authz-transport http: name authz's HTTP transport (--authz-http)"]
            )
    tls = _reloading(_tls_files(env), args.out, env)
    rendered = envoy_config.render(
        envoy_config.load(args.source),
        listen=args.listen,
        admin=args.admin,
        authz=authz,
        adapter=args.adapter,
        policy=EdgePolicy.from_env(env),
        diag=args.diag,
        tls=tls,
        authz_transport=transport,
        adapter_health_port=_adapter_health_port(args, env),
    )
    if args.out is None:
        import yaml

        sys.stdout.write(yaml.safe_dump(rendered, sort_keys=False))
        return 0
    if tls is not None and tls.sds_dir is not None:  # before the bootstrap that names them
        for name, resource in envoy_config.sds_resources(tls).items():
            envoy_config.write(resource, tls.sds_dir / name, mode=0o644)
    envoy_config.write(rendered, args.out, mode=0o644)  # Envoy runs as another user
    return 0


def _reloading(
    tls: envoy_config.TlsFiles | None, out: Path | None, env: Mapping[str, str]
) -> envoy_config.TlsFiles | None:
    """With ORRERY_A2A_TLS_RELOAD, the TLS files by SDS from resource files beside --out."""
    reader = EnvReader(env)
    reload = reader.boolean("ORRERY_A2A_TLS_RELOAD")
    reader.finish()
    if not reload:
        return tls
    if tls is None or out is None:
        raise ConfigError(["--tls-reload: needs --tls-cert, --tls-key and --out"])
    return dataclasses.replace(tls, sds_dir=out.parent)


COMMANDS = {
    "up": _cmd_up,
    "check": _cmd_check,
    "token": _cmd_token,
    "ask": _cmd_ask,
    "approve": _cmd_approve,
    "explain": _cmd_explain,
    "envoy-config": _cmd_envoy_config,
}


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    merged = _env_with_flags(args, os.environ if env is None else env)
    try:
        return COMMANDS[args.command](args, merged)
    except ConfigError as exc:
        print(f"orrery-a2a {args.command}: {redact(str(exc))}", file=sys.stderr)
        return 2
    except (StackError, envoy_config.EnvoyConfigError) as exc:
        # For up and envoy-config these are set-up problems (2); otherwise the request failed (1).
        print(f"orrery-a2a {args.command}: {redact(str(exc))}", file=sys.stderr)
        return 2 if args.command in {"up", "check", "envoy-config"} else 1


if __name__ == "__main__":
    sys.exit(main())
