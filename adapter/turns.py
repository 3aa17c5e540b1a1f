"""The owner of every turn's in-flight slot, from admission until the turn is over.

A turn (`SendMessage`, `SendStreamingMessage`) takes a slot under its principal's cap
(`limits.py`) before anything runs; over the cap it is refused with 429. The turn is over when
both of its parts are: the request that brought it (a unary answer, or a stream until it ends, its
client goes or it is drained) and the executor's run of it, which the SDK starts in the background
and which may outlive the request (`returnImmediately`, a client gone mid-stream, a drained
stream). `Turns` alone takes and gives back the slot: each part holds the turn while it lasts and
the last one to let go releases the slot, exactly once, whatever ended it (an answer, an error, a
cancellation). A run that never starts (the SDK refused the message first) leaves the request as
the only holder.

The executor's run finds its turn by the request's `ServerCallContext`, the object the SDK hands
to `AgentExecutor.execute` as `RequestContext.call_context`. A run that starts after its request
already let go (queued behind the task's previous turn) is not counted again.

`Turns` also ends them when the adapter stops: `stop()` sets `stopping`, which the executor
watches (a run still in the gateway ends its task FAILED `adapter_stopped`), and waits, bounded,
until no run is left — so the streams' final events and the store's last writes come after every
task's end, never before it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events import EventQueue

from adapter.limits import Limiter, Slot
from adapter.metrics import Metrics


@dataclass(slots=True)
class _Turn:
    context: ServerCallContext
    slot: Slot
    holders: int = 1


class Turns:
    """Admits turns under the in-flight cap and releases each one's slot when it is over."""

    def __init__(self, limiter: Limiter, metrics: Metrics) -> None:
        self._limiter = limiter
        self._metrics = metrics
        self._turns: dict[int, _Turn] = {}  # id(context) -> turn; the turn keeps its context alive
        self.stopping = asyncio.Event()  # the executor ends a run still in the gateway once set
        self._runs = 0
        self._no_runs = asyncio.Event()
        self._no_runs.set()

    @asynccontextmanager
    async def admitted(self, principal_key: str, context: ServerCallContext) -> AsyncIterator[None]:
        """Hold a slot for the request's turn while the block runs (raises the 429/503 refusal)."""
        turn = _Turn(context, await self._limiter.acquire(principal_key))
        self._turns[id(context)] = turn
        self._count()
        try:
            yield
        finally:
            await self._let_go(turn)

    @asynccontextmanager
    async def running(self, context: ServerCallContext) -> AsyncIterator[None]:
        """Keep the turn of `context` (if it is still held) while the executor runs it."""
        self._runs += 1
        self._no_runs.clear()
        try:
            async with self._holding(context):
                yield
        finally:
            self._runs -= 1
            if not self._runs:
                self._no_runs.set()

    @asynccontextmanager
    async def _holding(self, context: ServerCallContext) -> AsyncIterator[None]:
        turn = self._turns.get(id(context))  # an id held here is this live context's own
        if turn is None:
            yield
            return
        turn.holders += 1
        try:
            yield
        finally:
            await self._let_go(turn)

    async def stop(self, bound: float) -> None:
        """End every run still going (its task FAILED `adapter_stopped`) and wait, at most
        `bound` seconds, until none is left. Idempotent; a run that starts later ends at once."""
        self.stopping.set()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(bound):
                await self._no_runs.wait()

    def executor(self, inner: AgentExecutor) -> AgentExecutor:
        """`inner`, holding each turn while it runs it."""
        return _HoldingExecutor(inner, self)

    async def _let_go(self, turn: _Turn) -> None:
        turn.holders -= 1
        if turn.holders:
            return
        del self._turns[id(turn.context)]
        try:
            await turn.slot.release()
        finally:
            self._count()

    def _count(self) -> None:
        self._metrics.in_flight.set(self._limiter.in_flight())


class _HoldingExecutor(AgentExecutor):
    def __init__(self, inner: AgentExecutor, turns: Turns) -> None:
        self._inner = inner
        self._turns = turns

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        async with self._turns.running(context.call_context):
            await self._inner.execute(context, event_queue)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await self._inner.cancel(context, event_queue)
