"""The whole edge as real processes, started exactly as `orrery-a2a up` starts it.

`Edge` runs `stack.up.LocalStack` — the dev issuer, `python -m authz`, `python -m adapter` and
Envoy on `envoy/envoy.yaml` rendered by the stack's own renderer, every port ephemeral — with the
stack's supervisor, wiring and secrets. Only the knobs differ per variant: extra environment for
the children (what a user would export before `up`) and, for timeout tests, another Envoy file.

The supervisor is asyncio code that must keep reading the children's stderr for as long as they
run, so it lives on an event loop in a thread of its own: tests (sync or async, in any loop) only
talk to the edge over HTTP, and the fixture owning an `Edge` stops it.

Tokens are minted with the stack's dev-token code (`stack.tokens`), signed by this run's issuer
key. Each test uses subjects of its own (`unique`), so per-subject rate limits and task
ownership never leak between tests sharing one edge.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import re
import signal
import threading
import time
import uuid
from collections.abc import AsyncIterator, Coroutine, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import httpx
import yaml
from a2a.client import Client, ClientConfig, ClientFactory

from stack import envoy_config
from stack.keys import load_signing_key
from stack.settings import ADDRESSES, StackSettings
from stack.state import StackState
from stack.supervisor import Running
from stack.tokens import Audiences as TokenAudiences
from stack.tokens import TokenKind, TokenRequest, claims_for, mint_for_stack, sign
from stack.up import LocalStack, RunSecrets, generate_secrets
from stack.wiring import DEV_AUDIENCE, DEV_CONSOLE_AUDIENCE
from tests.admin_socket import admin_client
from tests.metrics import metric

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT = 180.0
STOP_TIMEOUT = 60.0
JSONRPC_HEADERS = {"Content-Type": "application/json", "A2A-Version": "1.0"}

T = TypeVar("T")


def unique(prefix: str) -> str:
    """A name no other test uses (subjects, agents, clients)."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def jsonrpc(method: str, params: Any = None, rpc_id: int | str = 1) -> dict[str, Any]:
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": rpc_id, "method": method}
    if params is not None:
        body["params"] = params
    return body


def message_params(text: str, **fields: Any) -> dict[str, Any]:
    """`SendMessage` params in JSON form: one user text part."""
    return {
        "message": {
            "role": "ROLE_USER",
            "messageId": uuid.uuid4().hex,
            "parts": [{"text": text}],
            **fields,
        }
    }


class Edge:
    """One running edge; see the module docstring."""

    def __init__(
        self, root: Path, env: Mapping[str, str] | None = None, envoy_yaml: Path | None = None
    ) -> None:
        state_dir = root / "state"
        state_dir.mkdir(mode=0o700, parents=True)
        settings_env = dict.fromkeys(ADDRESSES, "127.0.0.1:0")
        settings_env["ORRERY_A2A_STATE_DIR"] = str(state_dir)
        settings_env["ORRERY_A2A_READY_TIMEOUT"] = "120s"  # a busy shared machine
        if envoy_yaml is not None:
            settings_env["ORRERY_A2A_ENVOY_CONFIG"] = str(envoy_yaml)
        # As `orrery-a2a up` does: the stack's settings and the children's environment are the
        # same mapping (so e.g. ORRERY_A2A_REPLICAS in `env` applies), the ports always ephemeral.
        inherited = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
        settings = StackSettings.from_env({**inherited, **settings_env})
        self.output = io.StringIO()
        self.stack = LocalStack(settings, inherited, self.output)
        self.secrets: RunSecrets = generate_secrets(state_dir)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        try:
            self.state: StackState = self._call(self.stack.start_all(self.secrets), START_TIMEOUT)
        except BaseException:
            self.close()
            raise

    def _call(self, coroutine: Coroutine[Any, Any, T], timeout: float = STOP_TIMEOUT) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout)

    def close(self) -> None:
        """Stop every component (Envoy first), remove the run's secrets, end the loop."""
        try:
            self._call(self.stack.supervisor.stop())
            self.stack.cleanup()
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(STOP_TIMEOUT)
            self._loop.close()

    # --- the processes ------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """Envoy's listener: the only address a client uses."""
        return self.state.url

    def component(self, name: str) -> Running:
        (running,) = [item for item in self.stack.supervisor.running if item.name == name]
        return running

    @property
    def adapter_url(self) -> str:
        """The adapter's own loopback address (for its /metrics; clients never use it)."""
        return f"http://{self.component('adapter').details['addr']}"

    def kill(self, name: str) -> int:
        """Stop one component with SIGTERM, as if it had crashed; its exit code."""

        async def terminate() -> int:
            process = self.component(name).process
            process.send_signal(signal.SIGTERM)
            return await process.wait()

        return self._call(terminate())

    def log(self, name: str) -> Path:
        return self.stack.supervisor.log_dir / f"{name}.log"

    def events(self, name: str, event: str) -> list[dict[str, Any]]:
        """The JSON log events named `event` that component `name` has written so far."""
        found = []
        for line in self.log(name).read_text(encoding="utf-8").splitlines():
            if line.startswith("{"):
                with contextlib.suppress(ValueError):
                    record = json.loads(line)
                    if record.get("event") == event:
                        found.append(record)
        return found

    async def event(self, name: str, event: str, **fields: Any) -> dict[str, Any]:
        """The first `event` of component `name` with these field values, once it is logged
        (the supervisor copies each child's stderr to its log as it comes)."""
        deadline = time.monotonic() + STOP_TIMEOUT
        while time.monotonic() < deadline:
            for record in self.events(name, event):
                if all(record.get(key) == value for key, value in fields.items()):
                    return record
            await asyncio.sleep(0.05)
        raise AssertionError(f"{name} logged no {event} with {fields}")

    async def access(self, request_id: str) -> dict[str, Any]:
        """Envoy's access-log line for `request_id`, once Envoy has written it."""
        return await self.event("envoy", "access", request_id=request_id)

    async def envoy_counter(self, name: str) -> int:
        """One of Envoy's counters from its admin API, e.g. `cluster.adapter.upstream_rq_total`
        (how many requests Envoy sent to the adapter)."""
        async with admin_client(self.state.admin, timeout=30) as http:
            response = await http.get(
                "/stats",
                params={"format": "json", "filter": f"^{re.escape(name)}$"},
            )
        (stat,) = [s for s in response.json()["stats"] if s.get("name") == name]
        return int(stat["value"])

    async def _adapter_metric(self, sample_name: str) -> float:
        return await metric(f"{self.adapter_url}/metrics", sample_name)

    async def authz_metric(self, sample_name: str) -> float:
        """A metric of authz's, summed over its label sets (its loopback `/metrics`)."""
        return await metric(
            f"http://{self.component('authz').details['diag']}/metrics", sample_name
        )

    async def adapter_requests(self) -> float:
        """Requests the adapter has answered on /a2a and /approvals (its Prometheus counter)."""
        return await self._adapter_metric("orrery_a2a_requests_total")

    async def turns_finished(self) -> None:
        """Wait until the adapter runs no turn (its in-flight gauge is back to 0)."""
        deadline = time.monotonic() + STOP_TIMEOUT
        while await self._adapter_metric("orrery_a2a_turns_in_flight") > 0:
            assert time.monotonic() < deadline, "turns still in flight"
            await asyncio.sleep(0.05)

    # --- credentials ------------------------------------------------------------------------

    def token(self, kind: TokenKind = "delegated", **fields: Any) -> str:
        """A dev token from this run's issuer, like `orrery-a2a token --kind KIND …`."""
        return mint_for_stack(self.state, TokenRequest(kind=kind, **fields), now=int(time.time()))

    def claims(self, kind: TokenKind = "delegated", **fields: Any) -> dict[str, Any]:
        """The claims `token` would sign, for a test that breaks one of them on purpose."""
        audiences = TokenAudiences(a2a=DEV_AUDIENCE, console=DEV_CONSOLE_AUDIENCE)
        return claims_for(
            TokenRequest(kind=kind, **fields),
            issuer=self.state.issuer,
            audiences=audiences,
            now=int(time.time()),
        )

    def sign(self, claims: Mapping[str, Any]) -> str:
        """Any claims, signed with this run's issuer key (a token authz will verify)."""
        return sign(load_signing_key(self.secrets.issuer_key), claims)

    # --- clients ----------------------------------------------------------------------------

    async def rpc(
        self,
        token: str | None,
        method: str,
        params: Any = None,
        *,
        headers: Mapping[str, str] | None = None,
    ) -> httpx.Response:
        """One raw JSON-RPC call through Envoy (for wire-level checks the SDK client hides)."""
        sent = {**JSONRPC_HEADERS, **(bearer(token) if token else {}), **(headers or {})}
        async with httpx.AsyncClient(timeout=60) as http:
            return await http.post(f"{self.url}/a2a", json=jsonrpc(method, params), headers=sent)

    async def decide(
        self, token: str | None, action_id: str, decision: str = "approve"
    ) -> httpx.Response:
        """`POST /approvals/{action_id}` through Envoy."""
        async with httpx.AsyncClient(timeout=60) as http:
            return await http.post(
                f"{self.url}/approvals/{action_id}",
                json={"decision": decision},
                headers=bearer(token) if token else {},
            )

    @contextlib.asynccontextmanager
    async def client(
        self, token: str, *, streaming: bool = False, binding: str = "JSONRPC"
    ) -> AsyncIterator[Client]:
        """The real a2a-sdk client (ClientFactory from the public card) through Envoy, on the
        card's interface of `binding` (JSONRPC, or HTTP+JSON)."""
        async with httpx.AsyncClient(headers=bearer(token), timeout=120) as http:
            config = ClientConfig(
                httpx_client=http, streaming=streaming, supported_protocol_bindings=[binding]
            )
            client = await ClientFactory(config).create_from_url(self.url)
            try:
                yield client
            finally:
                await client.close()


@contextlib.contextmanager
def running_edge(
    root: Path, env: Mapping[str, str] | None = None, envoy_yaml: Path | None = None
) -> Iterator[Edge]:
    edge = Edge(root, env, envoy_yaml)
    try:
        yield edge
    finally:
        edge.close()


def envoy_yaml_with_timeouts(path: Path, *, idle: str, request: str) -> Path:
    """`envoy/envoy.yaml` with shorter stream timeouts, written to `path` for `Edge`.

    Only the connection manager's `request_timeout` and `stream_idle_timeout` and the a2a routes'
    `idle_timeout` change, so a test can prove in seconds what the real file promises in minutes.
    """
    config = envoy_config.load(envoy_config.repo_config_path())
    listener = envoy_config.listener(config)
    manager = listener["filter_chains"][0]["filters"][0]["typed_config"]
    manager["request_timeout"] = request
    manager["stream_idle_timeout"] = idle
    for route in manager["route_config"]["virtual_hosts"][0]["routes"]:
        if route["name"] in ("a2a", "a2a_slash"):
            route["route"]["idle_timeout"] = idle
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path
