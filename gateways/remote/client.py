"""`RemoteAgents`: one call to an allowlisted remote A2A agent, bounded, logged and counted.

A call fetches (once) and pins the agent's card, gets the agent's outbound token, and sends one
`SendMessage` with the a2a-sdk client over the JSON-RPC binding, blocking until the remote task
ends, through the guarded transport (`transport.py`: origin, addresses, hop header, no
redirects, byte cap). The whole call is bounded by `ORRERY_A2A_REMOTE_TIMEOUT`, and one principal
runs at most `ORRERY_A2A_REMOTE_MAX_CALLS_PER_PRINCIPAL` calls at once (in this process). What the
caller gets is the screened reply text (`screening.py`) or a `RemoteAgentError` with a reason
code; each call logs one `remote_call` event and counts one outcome.

Who may call is not decided here: a gateway offers a call only as a guarded action that the
delegating person approved (see `gateways/demo.py` and `adk_tool.py`).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import Counter

import httpx
from a2a.client import ClientConfig, ClientFactory
from a2a.client.errors import A2AClientTimeoutError
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import A2AError
from google.protobuf import json_format

from gateways.remote.cards import CardPins
from gateways.remote.credentials import TokenSource, token_source
from gateways.remote.errors import RemoteAgentError
from gateways.remote.metrics import UNLISTED, RemoteMetrics
from gateways.remote.screening import reply_text
from gateways.remote.settings import RemoteSettings
from gateways.remote.transport import GuardedTransport
from runtime import logs

logger = logging.getLogger("gateways.remote")


class RemoteAgents:
    """The allowlisted remote agents and the one way to call them."""

    def __init__(self, settings: RemoteSettings, metrics: RemoteMetrics) -> None:
        self._settings = settings
        self._metrics = metrics
        self._cards = CardPins(settings)
        self._tokens: dict[str, TokenSource] = {
            name: token_source(agent, settings) for name, agent in settings.agents.items()
        }
        self._running: Counter[str] = Counter()

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self._settings.agents))

    async def call(self, name: str, text: str, *, principal_key: str) -> str:
        """The screened reply of agent `name` to `text`, sent for `principal_key`."""
        started = time.monotonic()
        label = name if name in self._settings.agents else UNLISTED
        outcome = "ok"
        try:
            return await self._call(name, text, principal_key)
        except RemoteAgentError as exc:
            outcome = exc.reason
            raise
        finally:
            seconds = time.monotonic() - started
            self._metrics.observe(label, outcome, seconds)
            logs.event(
                logger,
                "remote_call",
                logging.INFO if outcome == "ok" else logging.WARNING,
                agent=label,
                outcome=outcome,
                principal=principal_key,
                seconds=round(seconds, 3),
            )

    async def _call(self, name: str, text: str, principal_key: str) -> str:
        agent = self._settings.agents.get(name)
        if agent is None:
            raise RemoteAgentError(
                "not_allowlisted", f"{name!r} is not an allowlisted remote agent"
            )
        if self._running[principal_key] >= self._settings.max_calls_per_principal:
            raise RemoteAgentError(
                "busy",
                f"at most {self._settings.max_calls_per_principal} remote calls run at once "
                "for one principal",
            )
        self._running[principal_key] += 1
        try:
            async with asyncio.timeout(self._settings.timeout):
                card = await self._cards.card(agent)
                token = await self._tokens[name].token()
                return await self._send(card, agent.card_url, token, text)
        except (TimeoutError, A2AClientTimeoutError, httpx.TimeoutException):
            raise RemoteAgentError("timeout", "the remote agent did not answer in time") from None
        finally:
            self._running[principal_key] -= 1
            if not self._running[principal_key]:
                del self._running[principal_key]

    async def _send(self, card: pb.AgentCard, origin: str, token: str | None, text: str) -> str:
        transport = GuardedTransport(origin, self._settings)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with httpx.AsyncClient(
            transport=transport,
            headers=headers,
            follow_redirects=False,
            timeout=self._settings.timeout,
        ) as http:
            client = ClientFactory(
                ClientConfig(
                    httpx_client=http, streaming=False, supported_protocol_bindings=["JSONRPC"]
                )
            ).create(card)
            request = pb.SendMessageRequest(
                message=pb.Message(
                    role=pb.Role.ROLE_USER,
                    message_id=uuid.uuid4().hex,
                    parts=[pb.Part(text=text)],
                )
            )
            final: pb.StreamResponse | None = None
            try:
                async for event in client.send_message(request):
                    final = event
            except A2AClientTimeoutError:
                raise
            except (A2AError, json_format.Error, ValueError, TypeError):
                # A JSON-RPC error, a failed connection, or an answer the SDK cannot read as an
                # A2A response (it raises protobuf's ParseError, ValueError or TypeError for
                # those): the remote failed, the turn does not.
                raise RemoteAgentError(
                    "remote_error", "the remote agent answered an error or could not be reached"
                ) from None
            finally:
                await client.close()
        if final is None:
            raise RemoteAgentError("remote_error", "the remote agent answered nothing")
        return reply_text(final)
