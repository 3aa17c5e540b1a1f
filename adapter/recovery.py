"""The recovery sweep: tasks whose turn is gone end FAILED `turn_lost`.

A live turn never leaves its task `SUBMITTED` or `WORKING` for long: the executor ends it by
`ORRERY_A2A_TURN_DEADLINE` at the latest, and a stopping adapter ends its turns when the shutdown
grace is over (`endings.py`). A task still in such a state well after that has no turn any more:
the replica running it was killed (SIGKILL, a crash, a lost node), or the store failed just as the
turn wrote its end (the SDK's own FAILED write then fails too).

Which replica ran a task is not recorded; the bound is by age instead of by a lease: a task whose
status has not changed for the turn deadline plus `STALE_MARGIN` is stale, whoever ran it, since
no replica's turn lasts that long. So any replica may end it, with no heartbeat to write and no
schema for owners of turns; the cost is that a lost task is ended up to the deadline + margin +
one `INTERVAL` after its turn began, not at once. Every replica sweeps when it starts (the one
restarted after a crash ends its own lost tasks, once they are old enough) and every `INTERVAL`
after; a write is a compare-and-swap (PostgreSQL), so replicas sweeping together end a task
once, and its end reaches every replica's subscribers through the shared event log.

A turn that overlapped a store outage on this replica (`outage.py`) need not wait that long:
the replica knows it ran the turn, and that its run is over. Overlapped means: running when the
outage was first seen, or ended less than `RECENT` seconds before (its end may still have been
on its way to the store). Once the store answers again, such a
task still `SUBMITTED`/`WORKING` lost its end to the outage, and is ended `turn_lost` at once
(checked every `SETTLE_INTERVAL` while any is waiting, at most `MAX_WATCHED` of them; the age
sweep still covers any that were not watched).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator

from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.cluster.task_store import (
    ConcurrentTaskModificationError,
    StoredTask,
    VersionedTaskStore,
)
from a2a.server.context import ServerCallContext
from a2a.server.events import EventQueue
from a2a.types import a2a_pb2 as pb

from adapter.endings import failed_status
from adapter.metrics import Metrics
from adapter.outage import Outage
from adapter.stores.protocols import RUNNING, SdkTaskStore, TaskStore
from runtime import logs

logger = logging.getLogger("adapter.recovery")

STALE_MARGIN = 30.0  # seconds past the turn deadline before a RUNNING task counts as lost
INTERVAL = 30.0  # seconds between sweeps
BATCH = 100  # tasks ended per store call; a sweep repeats until fewer are found
SETTLE_INTERVAL = 2.0  # seconds between checks of turns that overlapped an outage
MAX_WATCHED = 10000  # turns watched at once; beyond it, the age sweep alone ends them
RECENT = 15.0  # seconds after its run a turn still counts as overlapping an outage seen then


class Recovery:
    """Ends stale tasks at start-up and every `INTERVAL` (see the module docstring)."""

    def __init__(
        self,
        tasks: TaskStore,
        sdk_tasks: SdkTaskStore,
        outage: Outage,
        metrics: Metrics,
        *,
        turn_deadline: float,
    ) -> None:
        self._tasks = tasks
        self._sdk_tasks = sdk_tasks
        self._outage = outage
        self._metrics = metrics
        self.stale_after = turn_deadline + STALE_MARGIN
        self._loop: asyncio.Task[None] | None = None
        self._running: dict[str, int] = {}  # task id -> runs of it on this replica now
        self._watched: dict[str, ServerCallContext] = {}  # turns that overlapped an outage
        # runs ended in the last RECENT seconds, oldest first: task id -> (context, ended at)
        self._recent: OrderedDict[str, tuple[ServerCallContext, float]] = OrderedDict()
        self._wake = asyncio.Event()
        outage.on_down(self._outage_began)

    def _outage_began(self) -> None:
        now = time.monotonic()
        for task_id, (context, ended_at) in self._recent.items():
            if now - ended_at < RECENT:
                self._watch(task_id, context)
        self._recent.clear()

    def _watch(self, task_id: str, context: ServerCallContext) -> None:
        if len(self._watched) < MAX_WATCHED:
            self._watched[task_id] = context
            self._wake.set()

    def executor(self, inner: AgentExecutor) -> AgentExecutor:
        """`inner`, with each run that overlapped a store outage watched after it ends."""
        return _WatchedExecutor(inner, self)

    async def settle(self) -> int:
        """End the watched tasks whose run is over and which are still RUNNING; how many.
        Raises (keeping them watched) while the store does not answer."""
        ended = 0
        for task_id, context in list(self._watched.items()):
            if self._running.get(task_id):
                continue  # another run of it (a retry) is under way
            if await self._end(task_id, context):
                ended += 1
            del self._watched[task_id]
        self._ended(ended)
        return ended

    async def _end(self, task_id: str, context: ServerCallContext) -> bool:
        stored = await self._sdk_tasks.get(task_id, context)  # owner-scoped: the turn's caller
        task = stored.task if isinstance(stored, StoredTask) else stored
        if task is None or task.status.state not in RUNNING:
            return False
        ended = pb.Task()
        ended.CopyFrom(task)
        ended.status.CopyFrom(_lost(task))
        store = self._sdk_tasks
        if not isinstance(store, VersionedTaskStore):
            await store.save(ended, context)
            return True
        event = pb.TaskStatusUpdateEvent(
            task_id=task.id, context_id=task.context_id, status=ended.status
        )
        version = stored.version if isinstance(stored, StoredTask) else None
        if version is None:
            return False
        try:
            await store.save(ended, event=event, prev=task, prev_version=version, context=context)
        except ConcurrentTaskModificationError:
            return False  # written meanwhile: it moved on
        return True

    def _ended(self, count: int) -> None:
        if count:
            self._metrics.turns_ended.labels("turn_lost").inc(count)
            logs.event(logger, "stale_tasks_ended", logging.WARNING, count=count)

    async def sweep(self) -> int:
        """End every stale task now; how many were ended (logged, counted as `turn_lost`)."""
        ended = 0
        while True:
            found = await self._tasks.end_stale(self.stale_after, _lost, limit=BATCH)
            ended += found
            if found < BATCH:
                break
        self._ended(ended)
        return ended

    def start(self) -> None:
        if self._loop is None:
            self._loop = asyncio.get_running_loop().create_task(self._forever(), name="recovery")

    async def close(self) -> None:
        if self._loop is not None:
            self._loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop

    async def _forever(self) -> None:
        next_sweep = 0.0
        while True:
            self._wake.clear()
            mark = self._outage.mark()
            try:
                if self._watched:
                    await self.settle()
                if time.monotonic() >= next_sweep:
                    await self.sweep()
                    next_sweep = time.monotonic() + INTERVAL
                self._outage.answered(mark)
            except Exception as exc:  # noqa: BLE001 - next time; an outage is logged once
                if self._outage.caused(exc):
                    self._outage.failed(exc)
                else:
                    logs.event(
                        logger, "recovery_failed", logging.ERROR, error_type=type(exc).__name__
                    )
            wait = SETTLE_INTERVAL if self._watched else next_sweep - time.monotonic()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(wait, 0.0)):
                    await self._wake.wait()

    @contextlib.asynccontextmanager
    async def running(self, task_id: str, context: ServerCallContext) -> AsyncIterator[None]:
        """A run of `task_id` on this replica; watched after it if it overlapped an outage."""
        incidents = self._outage.incidents
        self._running[task_id] = self._running.get(task_id, 0) + 1
        try:
            yield
        finally:
            left = self._running[task_id] - 1
            if left:
                self._running[task_id] = left
            else:
                del self._running[task_id]
            if self._outage.down or self._outage.incidents != incidents:
                self._watch(task_id, context)
            else:
                self._remember(task_id, context)

    def _remember(self, task_id: str, context: ServerCallContext) -> None:
        now = time.monotonic()
        self._recent.pop(task_id, None)
        self._recent[task_id] = (context, now)
        while self._recent:
            oldest = next(iter(self._recent.values()))
            if now - oldest[1] < RECENT and len(self._recent) <= MAX_WATCHED:
                break
            self._recent.popitem(last=False)


class _WatchedExecutor(AgentExecutor):
    def __init__(self, inner: AgentExecutor, recovery: Recovery) -> None:
        self._inner = inner
        self._recovery = recovery

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        if not context.task_id:  # refused by the executor before any task exists
            await self._inner.execute(context, event_queue)
            return
        async with self._recovery.running(context.task_id, context.call_context):
            await self._inner.execute(context, event_queue)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await self._inner.cancel(context, event_queue)


def _lost(task: pb.Task) -> pb.TaskStatus:
    return failed_status(task.id, task.context_id, "turn_lost")
