"""Adapter test plumbing: the real app on a real port, the real a2a-sdk client, minted assertions.

Every request gets a fresh `x-request-id` and an `x-orrery-principal` signed for it with
`contract.assertion.sign` (an httpx request hook), exactly what Envoy + authz put on a request.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from a2a.client import Client, ClientConfig, ClientFactory
from a2a.types import a2a_pb2 as pb
from aiohttp import web
from opentelemetry.trace import TracerProvider

from adapter.app import GATEWAY, bind, make_app, start
from adapter.gateway import Proposal, action_digest
from adapter.settings import AdapterSettings
from contract.assertion import AssertionKeys, new_keys_spec, sign
from contract.identity import Autonomy, Principal, Surface
from tests.adapter.fakes import RecordingGateway

FAKE_GATEWAY = "tests.adapter.fakes:create"
PROPOSAL = Proposal(
    owner="k1",
    subject="alice",
    session_id="s",
    task_id="t",
    tool="restart_service",
    args={"service": "x"},
    level="L3",
    ttl=60,
    digest=action_digest("restart_service", {"service": "x"}),
)


KEYS_SPEC = new_keys_spec("test")
KEYS = AssertionKeys.parse(KEYS_SPEC)


def delegated(
    agent: str = "agent-1", subject: str = "alice", autonomy: Autonomy = "L3"
) -> Principal:
    return Principal(
        kind="delegated",
        subject=subject,
        client="client-a",
        agent=agent,
        role="admin",
        autonomy=autonomy,
    )


def service(client: str = "svc-1") -> Principal:
    return Principal(
        kind="service", subject=client, client=client, agent="", role="operator", autonomy="L2"
    )


def human(subject: str = "alice") -> Principal:
    return Principal(
        kind="human", subject=subject, client="console", agent="", role="admin", autonomy="L3"
    )


def assertion_headers(
    principal: Principal,
    surface: Surface = "a2a",
    *,
    keys: AssertionKeys = KEYS,
    request_id: str | None = None,
    now: int | None = None,
    token_expires_at: int | None = None,
) -> dict[str, str]:
    """What Envoy + authz put on a request: a fresh request id and an assertion signed for it
    (the caller's bearer token expiring in an hour, or at `token_expires_at`)."""
    rid = request_id or uuid.uuid4().hex
    issued = int(time.time()) if now is None else now
    token_exp = issued + 3600 if token_expires_at is None else token_expires_at
    value = sign(
        keys, principal, surface=surface, request_id=rid, token_expires_at=token_exp, now=issued
    )
    return {"x-request-id": rid, "x-orrery-principal": value}


@dataclass
class Server:
    base: str
    app: web.Application
    runner: web.AppRunner

    @property
    def gateway(self) -> RecordingGateway:
        gateway = self.app[GATEWAY]
        assert isinstance(gateway, RecordingGateway)
        return gateway

    def http(
        self, principal: Principal | None, surface: Surface = "a2a", **kwargs: Any
    ) -> httpx.AsyncClient:
        """An httpx client that signs an assertion for every request (None: no assertion)."""

        async def sign_request(request: httpx.Request) -> None:
            if principal is not None:
                request.headers.update(assertion_headers(principal, surface))

        kwargs.setdefault("timeout", 60)
        return httpx.AsyncClient(
            base_url=self.base, event_hooks={"request": [sign_request]}, **kwargs
        )

    @asynccontextmanager
    async def client(
        self, principal: Principal, *, streaming: bool = False, binding: str = "JSONRPC"
    ) -> AsyncIterator[Client]:
        """The real a2a-sdk client (ClientFactory) acting as `principal`, on the card's
        interface of `binding` (JSONRPC, or HTTP+JSON)."""
        async with self.http(principal) as http:
            config = ClientConfig(
                httpx_client=http, streaming=streaming, supported_protocol_bindings=[binding]
            )
            factory = ClientFactory(config)
            client = await factory.create_from_url(self.base)
            try:
                yield client
            finally:
                await client.close()

    async def rpc(
        self,
        principal: Principal | None,
        method: str,
        params: Any = None,
        *,
        rpc_id: Any = 1,
        headers: Mapping[str, str] | None = None,
        path: str = "/a2a",
    ) -> httpx.Response:
        """A raw JSON-RPC call (for wire-level checks the SDK client hides)."""
        body: dict[str, Any] = {"jsonrpc": "2.0", "id": rpc_id, "method": method}
        if params is not None:
            body["params"] = params
        all_headers = {"A2A-Version": "1.0", "Content-Type": "application/json", **(headers or {})}
        async with self.http(principal) as http:
            return await http.post(path, content=json.dumps(body), headers=all_headers)


def settings_for(base: str, env: Mapping[str, str] | None = None) -> AdapterSettings:
    return AdapterSettings.from_env(
        {
            "ORRERY_A2A_ASSERTION_KEYS": KEYS_SPEC,
            "ORRERY_A2A_PUBLIC_URL": base + "/a2a",
            "ORRERY_A2A_GATEWAY": FAKE_GATEWAY,
            "ORRERY_A2A_SHUTDOWN_GRACE": "1s",
            **(env or {}),
        }
    )


@asynccontextmanager
async def running(
    env: Mapping[str, str] | None = None,
    *,
    tracer_provider: TracerProvider | None = None,
    clock: Callable[[], float] = time.time,
) -> AsyncIterator[Server]:
    """The adapter app on 127.0.0.1:<free port>, with the recording gateway by default;
    approvals expire by `clock`."""
    sock = bind("127.0.0.1", 0)
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    app = await make_app(settings_for(base, env), tracer_provider=tracer_provider, clock=clock)
    runner = await start(app, sock, shutdown_timeout=5)
    try:
        yield Server(base, app, runner)
    finally:
        await runner.cleanup()


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    async with running() as started:
        yield started


@pytest.fixture
async def replicas(database_url: str) -> AsyncIterator[list[Server]]:
    """Two adapters on one fresh PostgreSQL schema."""
    async with fresh_schema(database_url) as schema:
        env = {"DATABASE_URL": database_url, "ORRERY_A2A_DB_SCHEMA": schema}
        async with running(env) as one, running(env) as two:
            yield [one, two]


def message_params(text: str = "how is checkout?", **fields: Any) -> dict[str, Any]:
    """`SendMessage` params in JSON form: one user text part, a fresh `messageId` unless `fields`
    name one."""
    message = {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": text}]}
    return {"message": {**message, **fields}}


async def sse_events(response: httpx.Response) -> list[tuple[str, dict[str, Any]]]:
    """(SSE event name, JSON body) of every event of a streamed response, until it ends."""
    events: list[tuple[str, dict[str, Any]]] = []
    name = "message"
    async for line in response.aiter_lines():
        if line.startswith("event: "):
            name = line.removeprefix("event: ")
        elif line.startswith("data: "):
            events.append((name, json.loads(line.removeprefix("data: "))))
            name = "message"
    return events


async def followed(
    client: Client, task_id: str, attached: asyncio.Event
) -> list[pb.StreamResponse]:
    """Every event of a SubscribeToTask stream through the a2a-sdk client, until it ends;
    `attached` is set at the first (the Task: from then on the stream hears the task)."""
    events = []
    async for event in client.subscribe(pb.SubscribeToTaskRequest(id=task_id)):
        events.append(event)
        attached.set()
    return events


def text_message(
    text: str, *, task_id: str = "", context_id: str = "", message_id: str | None = None
) -> pb.SendMessageRequest:
    return pb.SendMessageRequest(
        message=pb.Message(
            role=pb.ROLE_USER,
            message_id=message_id or uuid.uuid4().hex,
            task_id=task_id,
            context_id=context_id,
            parts=[pb.Part(text=text)],
        )
    )


async def send(client: Client, request: pb.SendMessageRequest) -> pb.Task:
    """Send and return the final task (the last task snapshot/state seen on the stream)."""
    task: pb.Task | None = None
    async for response in client.send_message(request):
        kind = response.WhichOneof("payload")
        if kind == "task":
            task = response.task
        elif kind == "status_update" and task is not None:
            task.status.CopyFrom(response.status_update.status)
        elif kind == "artifact_update" and task is not None:
            artifact = response.artifact_update.artifact
            kept = [a for a in task.artifacts if a.artifact_id != artifact.artifact_id]
            del task.artifacts[:]
            task.artifacts.extend([*kept, artifact])
    assert task is not None
    return task


def reply_text(task: pb.Task) -> str:
    return "\n".join(part.text for artifact in task.artifacts for part in artifact.parts)


def status_text(task: pb.Task) -> str:
    return "\n".join(part.text for part in task.status.message.parts if part.text)


def status_data(task: pb.Task) -> dict[str, Any]:
    from google.protobuf.json_format import MessageToDict

    for part in task.status.message.parts:
        if part.WhichOneof("content") == "data":
            value = MessageToDict(part.data)
            assert isinstance(value, dict)
            return value
    raise AssertionError("no data part in the status message")


Sender = Callable[[Principal, str], Awaitable[pb.Task]]


@asynccontextmanager
async def fresh_schema(database_url: str) -> AsyncIterator[str]:
    """A PostgreSQL schema of the caller's own, dropped afterwards (no collisions)."""
    import secrets

    import asyncpg

    name = "test_a2a_" + secrets.token_hex(6)
    try:
        yield name
    finally:
        connection = await asyncpg.connect(database_url)
        try:
            await connection.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")
        finally:
            await connection.close()
