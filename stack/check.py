"""`orrery-a2a check`: every problem the local stack would meet, before anything starts.

Each component otherwise reveals its own configuration errors one start at a time: authz dies,
you fix a variable, the adapter dies, you fix another. `check` asks all of them at once, with the
environment `up` would give each (`stack.wiring`, this run's choices stood in by placeholders of
the same shape), and reports every problem:

* **stack** — its own settings (addresses, replicas, state — a state directory too deep for
  Envoy's admin socket included —, the Envoy file) and every configured address some other
  process already listens on;
* **authz**, **adapter** — `python -m authz check`, `python -m adapter check` (the stack never
  imports the services: it runs their checks, `runtime.checks`), including `--replicas`
  prerequisites (replicated adapters need `DATABASE_URL` and `ORRERY_A2A_REDIS_URL`);
* **envoy** — the bootstrap rendered with the stack's addresses and the edge's policy, through
  `envoy --mode validate`.

Nothing is started and nothing listens; the checks run side by side. `up` runs this first.
"""

from __future__ import annotations

import asyncio
import socket
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from runtime.addresses import Address, address_family, format_address
from runtime.checks import read_report
from stack import envoy_config
from stack.addresses import client_host, fits_a_unix_socket
from stack.children import python_module
from stack.issuer import issuer_url
from stack.keys import new_assertion_keys
from stack.settings import ADDRESSES, StackSettings
from stack.wiring import Wiring, adapter_env, authz_env, child_env

CHECK_TIMEOUT = 60.0
COMPONENTS = ("stack", "authz", "adapter", "envoy")


@dataclass(frozen=True, slots=True)
class Problem:
    component: str
    text: str


def busy_addresses(settings: StackSettings) -> list[str]:
    """Configured addresses (port ≠ 0) another process already listens on. authz and the
    adapter take free ports when replicated, so theirs count only for one replica."""
    addresses: dict[str, Address] = {
        "ORRERY_A2A_LISTEN_ADDR": settings.listen,
        "ORRERY_A2A_ISSUER_ADDR": settings.issuer,
    }
    if settings.replicas == 1:
        addresses |= {
            "ORRERY_A2A_AUTHZ_ADDR": settings.authz,
            "ORRERY_A2A_AUTHZ_DIAG_ADDR": settings.authz_diag,
            "ORRERY_A2A_ADAPTER_ADDR": settings.adapter,
        }
        if settings.authz_transport == "http":
            addresses["ORRERY_A2A_AUTHZ_HTTP_ADDR"] = settings.authz_http
    problems = []
    for variable, address in addresses.items():
        if address[1] == 0:
            continue
        with socket.socket(address_family(address[0]), socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(address)
            except OSError as exc:
                flag = ADDRESSES[variable][0]
                problems.append(
                    f"{variable} ({flag}): cannot listen on {format_address(address)}"
                    f" ({exc.strerror or exc})"
                )
    return problems


def placeholder_wiring(settings: StackSettings) -> Wiring:
    """What `up` will decide, in the same shape: the issuer's URL, fresh assertion keys, the
    public URL (the user's, or Envoy's). A per-run card key is ours and always valid, so only
    the user's own keys are checked."""
    return Wiring(
        issuer=issuer_url(settings.issuer),
        assertion_keys=new_assertion_keys(),
        public_url=settings.public_url or f"http://{client_host(settings.listen)}/a2a",
        card_signing_keys=settings.card_signing_keys or "",
    )


async def component_problems(name: str, env: Mapping[str, str]) -> list[str]:
    """`python -m NAME check --json` with `env`; its problems, or why it could not say."""
    process = await asyncio.create_subprocess_exec(
        *python_module(name),
        "check",
        "--json",
        env=dict(env),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), CHECK_TIMEOUT)
    except TimeoutError:
        process.kill()
        await process.wait()
        return [f"its check did not finish within {CHECK_TIMEOUT:g}s"]
    problems = read_report(out.decode("utf-8", "replace"))
    if problems is None:
        last = err.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
        return [f"its check failed (exit {process.returncode}): {last[0]}"]
    return problems


async def envoy_problems(settings: StackSettings, env: Mapping[str, str]) -> list[str]:
    """The bootstrap rendered as `up` would (ports that are chosen at start stay 0), validated
    by the Envoy binary `up` would run."""
    authz = settings.authz_http if settings.authz_transport == "http" else settings.authz
    # A socket path too long is the stack's problem (its state directory), named once, there;
    # the rest of the bootstrap is still validated, with the file's admin address.
    admin = settings.admin if fits_a_unix_socket(settings.admin) else None
    try:
        config = envoy_config.render(
            envoy_config.load(settings.envoy_config),
            listen=settings.listen,
            admin=admin,
            authz=authz if settings.replicas == 1 else (authz[0], 0),
            adapter=settings.adapter if settings.replicas == 1 else (settings.adapter[0], 0),
            policy=settings.edge,
            authz_transport=settings.authz_transport,
        )
        binary = envoy_config.envoy_binary(dict(env))
    except envoy_config.EnvoyConfigError as exc:
        return [str(exc)]
    with tempfile.TemporaryDirectory(prefix="orrery-a2a-check-") as work:
        path = Path(work) / "envoy.yaml"
        envoy_config.write(config, path)
        try:
            process = await asyncio.create_subprocess_exec(
                str(binary),
                "--mode",
                "validate",
                "-c",
                str(path),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
            )
        except OSError as exc:
            return [f"ORRERY_A2A_ENVOY_BIN: cannot run {binary}: {exc.strerror or exc}"]
        out, _ = await asyncio.wait_for(process.communicate(), CHECK_TIMEOUT)
    if process.returncode == 0:
        return []
    lines = [line for line in out.decode("utf-8", "replace").splitlines() if line.strip()]
    return [f"{settings.envoy_config} does not validate: {(lines or ['no output'])[-1]}"]


async def check_stack(env: Mapping[str, str]) -> list[Problem]:
    """Every problem, component by component (`env` is the caller's, flags folded in)."""
    settings, stack_problems = StackSettings.read(env)
    problems = [Problem("stack", text) for text in stack_problems + busy_addresses(settings)]
    wiring = placeholder_wiring(settings)
    authz, adapter, envoy = await asyncio.gather(
        component_problems("authz", child_env(env, authz_env(settings, wiring))),
        component_problems("adapter", child_env(env, adapter_env(settings, wiring))),
        envoy_problems(settings, env),
    )
    for component, found in (("authz", authz), ("adapter", adapter), ("envoy", envoy)):
        problems += [Problem(component, text) for text in found]
    return problems


def render(problems: list[Problem], command: str = "check") -> list[str]:
    """What `check` (and `up`, when it refuses to start) prints."""
    if not problems:
        return [f"orrery-a2a {command}: ok ({', '.join(COMPONENTS)})"]
    lines = [f"orrery-a2a {command}: {len(problems)} problem(s); nothing was started"]
    lines += [f"  {problem.component + ':':<9}{problem.text}" for problem in problems]
    return lines
