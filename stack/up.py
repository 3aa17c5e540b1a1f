"""`orrery-a2a up`: the whole local stack as plain processes, until Ctrl-C.

Order: the dev issuer (authz needs its JWKS), authz, the adapter, then Envoy (whose clusters need
the addresses the others reported). Each starts only once the previous one is ready, so a failure
names the component that failed, not the first one that noticed. Once up, each process is kept
running on its own (`stack.supervisor`): one that exits is restarted on the same addresses, and
with `--replicas N` the others serve meanwhile. Stopping drains in order: Envoy stops accepting,
the adapters finish their streams (through Envoy, still running), then Envoy, authz and the
issuer stop (docs/operations.md#stopping-in-order). This run's secrets — the issuer's and the
agent card's signing keys and the assertion keys — are generated fresh and live in the private
state directory (see `stack.state`) or only in the children's environments; they are removed when
the stack stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import fcntl
import os
import re
import shlex
import shutil
import signal
import socket
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import aiohttp

from runtime.addresses import address_family, format_address, parse_address
from runtime.env import EnvReader
from stack import envoy_config
from stack.addresses import client_host
from stack.children import python_module
from stack.envoy_admin import admin_session, stop_accepting
from stack.keys import new_assertion_keys, new_signing_key, private_pem
from stack.settings import StackSettings
from stack.state import (
    CARD_KEY_FILE,
    ENVOY_ADMIN_SOCKET,
    ISSUER_KEY_FILE,
    STATE_FILE,
    StackError,
    StackState,
    default_state_dir,
    private_dir,
    write_private,
)
from stack.supervisor import (
    LOG_TAIL_LINES,
    Component,
    ComponentFailed,
    Pin,
    Probe,
    Running,
    Supervisor,
    describe_exit,
    tail,
)
from stack.wiring import (
    DEV_AUDIENCE,
    DEV_CONSOLE_AUDIENCE,
    Wiring,
    adapter_env,
    authz_env,
    child_env,
)

LOGS_DIR = "logs"
LATEST_LOGS = "latest"  # a symlink to the newest run's log directory
KEEP_RUNS = 10  # log directories of earlier runs kept, newest first
_RUN_ID = re.compile(r"\d{8}T\d{6}Z-\d+")
ENVOY_CONFIG_FILE = "envoy.yaml"
ENVOY_ADMIN_FILE = "envoy-admin.txt"
LOCK_FILE = "up.lock"
EXAMPLE_QUESTION = "Which services are unhealthy?"
# Ctrl-C, an orchestrator's stop, a closed terminal: each stops the stack in order.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# Stop phases, first to last: the adapters drain their streams through a still running Envoy
# (which stopped accepting before anything stopped), then Envoy, authz, the issuer.
ADAPTER_PHASE, ENVOY_PHASE, AUTHZ_PHASE, ISSUER_PHASE = range(4)
STOP_MARGIN_SECONDS = 5.0  # on top of an adapter's own drain delay and grace: its final events


@dataclass(frozen=True, slots=True)
class RunSecrets:
    """This run's secrets: the issuer's and the card's signing key files (0600) and the
    assertion keys (env only)."""

    issuer_key: Path
    assertion_keys: str
    card_key: Path


def generate_secrets(state_dir: Path) -> RunSecrets:
    key_path = state_dir / ISSUER_KEY_FILE
    write_private(key_path, private_pem(new_signing_key()))
    card_key = state_dir / CARD_KEY_FILE
    write_private(card_key, private_pem(new_signing_key()))
    return RunSecrets(issuer_key=key_path, assertion_keys=new_assertion_keys(), card_key=card_key)


def free_port(host: str) -> int:
    """A port the OS just had free. Only for Envoy's listener on port 0: the adapter must know
    the public URL before Envoy starts, so the port is chosen first (a tiny race, tests only)."""
    with socket.socket(address_family(host), socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port


def run_log_dir(state_dir: Path) -> Path:
    """This run's own log directory, `logs/<UTC start>-<pid>`: a failure excerpt then shows only
    this run, and names sort in start order."""
    run_id = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + f"-{os.getpid()}"
    return state_dir / LOGS_DIR / run_id


def keep_recent_runs(logs: Path, keep: int = KEEP_RUNS) -> None:
    """Delete all but the `keep` newest run directories (only names `up` made; anything else in
    `logs/` is left alone), so logs stay bounded however often the stack starts."""
    try:
        runs = sorted(
            (entry for entry in logs.iterdir() if _RUN_ID.fullmatch(entry.name)),
            key=lambda entry: entry.name,
        )
    except FileNotFoundError:
        return
    for old in runs[: max(0, len(runs) - keep)]:
        if old.is_dir() and not old.is_symlink():
            shutil.rmtree(old, ignore_errors=True)


def point_latest_at(log_dir: Path) -> None:
    """`logs/latest` → this run's directory (relative, so the state directory may move)."""
    latest = log_dir.parent / LATEST_LOGS
    with contextlib.suppress(FileNotFoundError):
        latest.unlink()
    latest.symlink_to(log_dir.name, target_is_directory=True)


@contextlib.contextmanager
def single_instance(state_dir: Path) -> Iterator[None]:
    """Hold an exclusive lock on the state directory for the lifetime of `up`."""
    fd = os.open(state_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StackError(
                f"another `orrery-a2a up` is running with its state in {state_dir}; "
                "stop it first, or give this one its own --state-dir and ports"
            ) from None
        yield
    finally:
        os.close(fd)


def envoy_probe(admin_file: Path) -> Probe:
    """Ready when the admin API (where `--admin-address-path` says it listens: the stack's Unix
    socket, once Envoy has bound it) answers /ready with 200."""

    async def probe() -> dict[str, Any] | None:
        try:
            admin = (await asyncio.to_thread(admin_file.read_text)).strip()
        except FileNotFoundError:
            return None
        if not admin:
            return None
        try:
            async with admin_session(admin) as session, session.get("/ready") as response:
                return {"admin": admin} if response.status == 200 else None
        except (aiohttp.ClientError, TimeoutError):
            return None

    return probe


async def envoy_stops_accepting(details: Mapping[str, Any]) -> None:
    """Envoy's drain step (`stack.envoy_admin`), at the admin socket its probe reported."""
    await stop_accepting(str(details["admin"]))


def envoy_component(
    name: str,
    config_path: Path,
    admin_file: Path,
    env: Mapping[str, str],
    *,
    ready_timeout: float = 60.0,
) -> Component:
    """Envoy on `config_path`, ready once its admin API (where it listens written to `admin_file`,
    where a stale one from an earlier run is removed first) answers /ready; it stops accepting
    before anything of the stack stops, and stops itself after the adapters."""
    admin_file.unlink(missing_ok=True)
    return Component(
        name,
        envoy_config.envoy_command(
            envoy_config.envoy_binary(dict(env)), config_path, admin_address_path=admin_file
        ),
        dict(env),
        ready=envoy_probe(admin_file),
        ready_timeout=ready_timeout,
        stop_phase=ENVOY_PHASE,
        drain=envoy_stops_accepting,
    )


def pin_env(**fields: str) -> Pin:
    """A `Pin` that restarts a component with each variable set to the ready detail named for
    it (`ORRERY_A2A_ADAPTER_ADDR="addr"`): on the very addresses it first bound."""

    def pin(component: Component, details: Mapping[str, Any]) -> Component:
        bound = {name: str(details[key]) for name, key in fields.items() if details.get(key)}
        return dataclasses.replace(component, env={**component.env, **bound})

    return pin


def pin_argument(flag: str, key: str) -> Pin:
    """A `Pin` that replaces the value after `flag` in the argv with the ready detail `key`."""

    def pin(component: Component, details: Mapping[str, Any]) -> Component:
        argv = list(component.argv)
        argv[argv.index(flag) + 1] = str(details[key])
        return dataclasses.replace(component, argv=argv)

    return pin


# What each reports in its serving event (docs/contract.md#start-up-event).
AUTHZ_PIN = pin_env(
    ORRERY_A2A_AUTHZ_ADDR="grpc",
    ORRERY_A2A_AUTHZ_DIAG_ADDR="diag",
    ORRERY_A2A_AUTHZ_HTTP_ADDR="http",  # with the HTTP transport
)
ADAPTER_PIN = pin_env(ORRERY_A2A_ADAPTER_ADDR="addr", ORRERY_A2A_ADAPTER_DIAG_ADDR="diag")


def adapter_stop_grace(env: Mapping[str, str]) -> float:
    """How long an adapter may take to stop: its drain delay and stream grace, plus a margin
    for the final events (the adapter's own defaults when unset or unreadable: `check` and the
    adapter itself report a bad value)."""
    reader = EnvReader(env)
    delay = reader.seconds("ORRERY_A2A_DRAIN_DELAY", "0s")
    grace = reader.seconds("ORRERY_A2A_SHUTDOWN_GRACE", "10s")
    return delay + grace + STOP_MARGIN_SECONDS


class LocalStack:
    """One run of `up`: settings in, a printed summary out, all children stopped at the end."""

    def __init__(self, settings: StackSettings, inherited: Mapping[str, str], out: TextIO) -> None:
        self.settings = settings
        self.inherited = inherited
        self.out = out
        self.state_dir = settings.state_dir
        self.supervisor = Supervisor(
            run_log_dir(settings.state_dir), notify=lambda line: self.say(f"orrery-a2a up: {line}")
        )

    def say(self, line: str = "") -> None:
        # After SIGHUP the terminal may be gone; stopping the stack matters more than saying so.
        with contextlib.suppress(OSError):
            print(line, file=self.out, flush=True)

    def _component(
        self, name: str, argv: list[str], own_env: Mapping[str, str], **options: Any
    ) -> Component:
        return Component(
            name,
            argv,
            child_env(self.inherited, own_env),
            ready_timeout=self.settings.ready_timeout,
            **options,
        )

    def _replica_names(self, component: str) -> list[str]:
        """`authz`, or `authz-1` … `authz-N` with several replicas."""
        if self.settings.replicas == 1:
            return [component]
        return [f"{component}-{number}" for number in range(1, self.settings.replicas + 1)]

    def _ready(self, running: Running, where: str) -> None:
        self.say(f"  {running.name:<8} ready   {where}  (pid {running.pid})")

    async def start_all(self, secrets: RunSecrets) -> StackState:
        settings = self.settings
        issuer = await self.supervisor.start(
            self._component(
                "issuer",
                [
                    *python_module("stack.issuer"),
                    "--key",
                    str(secrets.issuer_key),
                    "--addr",
                    format_address(settings.issuer),
                ],
                {},
                stop_phase=ISSUER_PHASE,
                pin=pin_argument("--addr", "addr"),
            )
        )
        issuer_url = str(issuer.details["issuer"])
        self._ready(issuer, issuer_url)

        listen = settings.listen
        if listen[1] == 0:
            listen = (listen[0], free_port(listen[0]))
        scheme = "http" if settings.tls is None else "https"
        url = f"{scheme}://{client_host(listen)}"
        # A user-set ORRERY_A2A_PUBLIC_URL (a proxy or port forward in front) is what the card
        # advertises; `check` had the adapter validate it before anything started.
        wiring = Wiring(
            issuer_url,
            secrets.assertion_keys,
            public_url=settings.public_url or f"{url}/a2a",
            card_signing_keys=settings.card_signing_keys or str(secrets.card_key),
        )

        authz_addresses = []
        for name in self._replica_names("authz"):
            authz = await self.supervisor.start(
                self._component(
                    name,
                    python_module("authz"),
                    authz_env(settings, wiring),
                    stop_phase=AUTHZ_PHASE,
                    pin=AUTHZ_PIN,
                )
            )
            transport = settings.authz_transport
            self._ready(
                authz,
                f"{authz.details.get(transport)} ({transport}), diag {authz.details.get('diag')}",
            )
            authz_addresses.append(parse_address(str(authz.details[transport])))
        adapter_addresses = []
        for name in self._replica_names("adapter"):
            own = adapter_env(settings, wiring)
            adapter = await self.supervisor.start(
                self._component(
                    name,
                    python_module("adapter"),
                    own,
                    stop_phase=ADAPTER_PHASE,
                    stop_grace=adapter_stop_grace(child_env(self.inherited, own)),
                    pin=ADAPTER_PIN,
                )
            )
            self._ready(adapter, str(adapter.details.get("addr")))
            adapter_addresses.append(parse_address(str(adapter.details["addr"])))

        config = envoy_config.render(
            envoy_config.load(settings.envoy_config),
            listen=listen,
            admin=settings.admin,
            authz=authz_addresses,
            adapter=adapter_addresses,
            policy=settings.edge,
            tls=settings.tls,
            authz_transport=settings.authz_transport,
        )
        config_path = self.state_dir / ENVOY_CONFIG_FILE
        envoy_config.write(config, config_path)
        envoy = await self.supervisor.start(
            envoy_component(
                "envoy",
                config_path,
                self.state_dir / ENVOY_ADMIN_FILE,
                self.inherited,
                ready_timeout=settings.ready_timeout,
            )
        )
        self._ready(envoy, f"{url}, admin {envoy.details['admin']}")
        state = StackState(
            pid=os.getpid(),
            url=url,
            issuer=issuer_url,
            audience=DEV_AUDIENCE,
            console_audience=DEV_CONSOLE_AUDIENCE,
            key_file=str(secrets.issuer_key),
            admin=str(envoy.details["admin"]),
            logs=str(self.supervisor.log_dir),
        )
        state.save(self.state_dir)
        return state

    def print_welcome(self, state: StackState) -> None:
        state_flag = ""
        default_dir = default_state_dir(
            {k: v for k, v in self.inherited.items() if k != "ORRERY_A2A_STATE_DIR"}
        )
        if self.state_dir != default_dir:
            state_flag = f" --state-dir {shlex.quote(str(self.state_dir))}"
        body = (
            '{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":'
            '{"role":"ROLE_USER","messageId":"curl-1","parts":[{"text":"'
            + EXAMPLE_QUESTION
            + '"}]}}}'
        )
        self.say()
        self.say(f"Orrery A2A is up at {state.url}   (logs: {state.logs})")
        if self.settings.public_url:
            self.say(
                f"  card: clients are sent to {self.settings.public_url} (ORRERY_A2A_PUBLIC_URL);"
                " `ask` follows the card there"
            )
        self.say("  ask:  " + f"orrery-a2a ask{state_flag} {shlex.quote(EXAMPLE_QUESTION)}")
        self.say(
            f"  curl: curl -sS {state.url}/a2a"
            f' -H "Authorization: Bearer $(orrery-a2a token{state_flag})"'
            " -H 'Content-Type: application/json' -H 'A2A-Version: 1.0'"
            f" -d {shlex.quote(body)}"
        )
        self.say("Ctrl-C stops everything.")

    def report_failure(self, failure: ComponentFailed) -> None:
        self.say(f"  {failure.name:<8} FAILED  {failure.reason}")
        self.show_log(failure.log_path)

    def show_log(self, log_path: Path) -> None:
        for line in tail(log_path, LOG_TAIL_LINES):
            self.say(f"           | {line}")
        self.say(f"           full log: {log_path}")

    def cleanup(self) -> None:
        """Remove this run's secrets and state; logs stay for a post-mortem."""
        for name in (
            STATE_FILE,
            ISSUER_KEY_FILE,
            CARD_KEY_FILE,
            ENVOY_CONFIG_FILE,
            ENVOY_ADMIN_FILE,
            ENVOY_ADMIN_SOCKET,
        ):
            (self.state_dir / name).unlink(missing_ok=True)

    async def run(self) -> int:
        """Start everything, keep it running, and stop it in order on Ctrl-C, SIGTERM or a closed
        terminal (SIGHUP): exit 0; 1 when the stack could not start."""
        self.say(f"orrery-a2a up: starting the local stack (state in {self.state_dir})")
        self.cleanup()  # whatever a killed earlier run left behind
        log_dir = self.supervisor.log_dir
        keep_recent_runs(log_dir.parent, KEEP_RUNS - 1)  # and this run's makes KEEP_RUNS
        log_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        point_latest_at(log_dir)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in STOP_SIGNALS:
            loop.add_signal_handler(signum, stop.set)
        stopping = asyncio.ensure_future(stop.wait())
        code = 0
        try:
            starting = asyncio.ensure_future(self.start_all(generate_secrets(self.state_dir)))
            await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if not starting.done():
                starting.cancel()
                with contextlib.suppress(asyncio.CancelledError, ComponentFailed):
                    await starting
            else:
                self.print_welcome(starting.result())
                self.supervisor.supervise()
                await stopping
        except ComponentFailed as failure:
            self.report_failure(failure)
            code = 1
        finally:
            stopping.cancel()
            self.say("orrery-a2a up: stopping…")
            stopped = await self.supervisor.stop()
            self.cleanup()
            for signum in STOP_SIGNALS:
                loop.remove_signal_handler(signum)
        summary = ", ".join(f"{name} ({describe_exit(rc)})" if rc else name for name, rc in stopped)
        self.say(f"orrery-a2a up: stopped {summary or 'nothing'}")
        return code


def run_up(settings: StackSettings, inherited: Mapping[str, str], out: TextIO) -> int:
    """Run the stack in the foreground; the state directory's lock makes it one per directory."""
    state_dir = private_dir(settings.state_dir)
    with single_instance(state_dir):
        return asyncio.run(LocalStack(settings, inherited, out).run())
