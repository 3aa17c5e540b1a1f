"""A blocking `SendMessage` that starts a task, run without the a2a-sdk's `ActiveTask`.

For every send, the SDK's request handler builds an `ActiveTask`: a producer and a consumer
`asyncio.Task`, an agent queue and a subscriber queue (each with a dispatcher task, on
culsans/aiologic queues and conditions), a request queue, locks and events — then the request
subscribes to it and waits for its events to come back through two queues. Under load that was
about half of the adapter's CPU per blocking send (py-spy, docs/adapter.md#performance), and for
a send that starts a task and waits for its answer it buys nothing: no other request can be
queued on a task nobody has heard of yet, and its one waiter is the request itself.

Such a send (not `returnImmediately`, no `taskId`) runs here instead: the executor (the same
chain as the SDK's: turn holding, recovery watch, gateway, deadline) runs in a task of its own,
and each event it enqueues is applied by the SDK's own `TaskManager` — the same task shapes, the
same saves (compare-and-swap with PostgreSQL, the event appended to the shared log) — before
`enqueue_event` returns. What other calls see of the task while the turn runs is what they see of
a turn run by the SDK (tests/adapter/test_blocking_sends.py):

* `GetTask`, `ListTasks` and a retry of the message read the store, written at each event.
* `CancelTask` on this replica asks the executor to cancel (CANCELED, saved) and stops the run;
  the sender is answered the cancelled task. On another replica it is the SDK's stored cancel:
  the run's next save loses its compare-and-swap, the run is stopped, and the sender is answered
  the task as stored.
* `SubscribeToTask` on this replica (memory store) gets the task, then the run's events as they
  are applied (`follow`); with PostgreSQL every replica tails the shared log (`handler.py`).
* A run that raises leaves its task FAILED (created FAILED if the run failed before the task
  was stored), as the SDK's consumer does, and the sender gets the error.
* The sender going away does not stop the run; only a cancel, the deadline or a stop does.

A run does not outlive the adapter: `aclose` stops what is left once the turns were ended.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator

from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.cluster.event_stream import TaskEventStream, VersionedEvent
from a2a.server.cluster.task_store import ConcurrentTaskModificationError
from a2a.server.context import ServerCallContext
from a2a.server.events import Event, EventQueue
from a2a.server.tasks.task_manager import TaskManager
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import InternalError, InvalidAgentResponseError

from adapter.stores.protocols import INTERRUPTED, TERMINAL, SdkTaskStore


def ends_turn(event: Event) -> bool:
    """A status (or task) in which no turn runs on the task any more: terminal or waiting."""
    return isinstance(event, pb.Task | pb.TaskStatusUpdateEvent) and (
        event.status.state in TERMINAL or event.status.state in INTERRUPTED
    )


class BlockingSends:
    """The blocking first sends running on this replica, by task id."""

    def __init__(
        self,
        executor: AgentExecutor,
        store: SdkTaskStore,
        event_stream: TaskEventStream | None,
    ) -> None:
        self._executor = executor
        self._store = store
        self._event_stream = event_stream
        self._running: dict[str, BlockingTurn] = {}

    def running(self, task_id: str) -> BlockingTurn | None:
        """The turn of `task_id` running here, if any (the caller has checked the owner)."""
        return self._running.get(task_id)

    async def send(self, request: RequestContext) -> pb.Task:
        """Run the turn of `request` (a new task's first message) and answer its task once
        the turn is over (terminal, or waiting for input)."""
        turn = BlockingTurn(self._executor, request, self._store, self._event_stream)
        self._running[turn.task_id] = turn
        turn.run.add_done_callback(lambda _: self._forget(turn))
        # A sender that goes away leaves the run going, as the SDK's producer does.
        return await asyncio.shield(turn.run)

    def _forget(self, turn: BlockingTurn) -> None:
        if self._running.get(turn.task_id) is turn:
            del self._running[turn.task_id]

    async def aclose(self) -> None:
        """Stop the runs still going (after `Turns.stop` ended theirs) and wait for them."""
        for turn in list(self._running.values()):
            await turn.stop()


class BlockingTurn(EventQueue):
    """One blocking send's turn: the executor's queue, applying each event as it comes."""

    def __init__(
        self,
        executor: AgentExecutor,
        request: RequestContext,
        store: SdkTaskStore,
        event_stream: TaskEventStream | None,
    ) -> None:
        if not request.task_id or not request.context_id:
            raise InternalError(message="a turn without a task id or a context id")
        self.task_id: str = request.task_id
        self._executor = executor
        self._request = request
        self._event_stream = event_stream
        self._manager = TaskManager(
            task_store=store,
            context=request.call_context,
            task_id=request.task_id,
            context_id=request.context_id,
            initial_message=request.message,
        )
        self._task: pb.Task | None = None  # as last saved
        self._events: list[Event] = []  # applied, for `follow`
        self._changed = asyncio.Event()  # set (and replaced) at each applied event and at the end
        self._lock = asyncio.Lock()  # one event applied at a time: the run's, or the cancel's
        self._cancelling = False
        self._superseded: pb.Task | None = None  # the task as stored by another writer
        self._over = False
        # Started in the request's context (its span, its log fields), as the SDK's producer is.
        self.run: asyncio.Task[pb.Task] = asyncio.ensure_future(self._drive())

    async def enqueue_event(self, event: Event) -> None:
        """The executor's events; none once a cancel has begun (the run is being stopped)."""
        if not self._cancelling:
            await self.apply(event)

    async def apply(self, event: Event) -> None:
        """Apply `event` to the task and save it, whether or not a cancel has begun."""
        async with self._lock:
            await self._apply_locked(event)

    async def _apply_locked(self, event: Event) -> None:
        try:
            await self._save(event)
        except ConcurrentTaskModificationError:
            # Another replica wrote the task (a cancel): take it as stored. A terminal task ends
            # the run; otherwise the event is applied again on top (as the SDK's consumer does).
            self._manager.invalidate()
            stored = await self._manager.get_task()
            if stored is not None and stored.status.state in TERMINAL:
                self._task = self._superseded = stored
                self._notify()
                raise _Superseded from None
            await self._save(event)
        self._events.append(event)
        self._notify()

    async def _save(self, event: Event) -> None:
        if isinstance(event, pb.Task):
            if self._task is not None:
                return  # the SDK ignores a second Task: the first one made the task
        elif not isinstance(event, pb.TaskStatusUpdateEvent | pb.TaskArtifactUpdateEvent):
            raise InvalidAgentResponseError(f"{type(event).__name__} in a task's turn")
        elif self._task is None:
            raise InvalidAgentResponseError(f"a {type(event).__name__} before the task")
        self._task = await self._manager.save_task_event(event)
        if self._event_stream is not None:  # the SDK's consumer publishes every applied event
            await self._event_stream.publish(
                self.task_id, VersionedEvent(event=event, version=self._manager.current_version)
            )

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def _drive(self) -> pb.Task:
        """The executor's run; the task once it is over."""
        try:
            await self._executor.execute(self._request, self)
        except _Superseded:
            pass
        except asyncio.CancelledError:
            if not self._cancelling:
                raise  # a stop (`aclose`) or a teardown, not a cancel of the task
        except Exception:
            await self._failed()
            raise
        finally:
            self._over = True
            self._notify()
        if self._superseded is not None:
            return self._superseded
        if self._task is None:
            raise InvalidAgentResponseError("the turn ended without a task")
        return self._task

    async def _failed(self) -> None:
        """The run raised: its task ends FAILED — created so if it was never stored — as the
        SDK's consumer does. A write that fails too (the store is down: usually why the run
        raised) is dropped: the sender gets the run's error, and the recovery sweep ends the
        task (`recovery.py`)."""
        with contextlib.suppress(Exception):
            async with self._lock:
                if self._task is None:
                    task = await self._manager.ensure_task_id(
                        self.task_id, self._manager.context_id or ""
                    )
                    task.status.state = pb.TASK_STATE_FAILED
                    task.status.timestamp.GetCurrentTime()
                    self._task = await self._manager.save_task_event(task)
                elif self._task.status.state not in TERMINAL:
                    status = pb.TaskStatus(state=pb.TASK_STATE_FAILED)
                    status.timestamp.GetCurrentTime()
                    await self._apply_locked(
                        pb.TaskStatusUpdateEvent(
                            task_id=self.task_id, context_id=self._task.context_id, status=status
                        )
                    )

    async def cancel(self, context: ServerCallContext) -> pb.Task:
        """`CancelTask` on the running turn (the SDK's `ActiveTask.cancel`): the executor's cancel
        writes CANCELED, the run is stopped; a task the run left unfinished is then CANCELED."""
        if not self.run.done():
            self._cancelling = True
            request = RequestContext(
                call_context=context,
                task_id=self.task_id,
                context_id=self._request.context_id,
                task=self._task,
            )
            try:
                await self._executor.cancel(request, _Applying(self))
            finally:
                self.run.cancel()
        await asyncio.wait({self.run})
        self._manager.invalidate()
        task = await self._manager.get_task()
        if task is None:
            raise InvalidAgentResponseError("a cancelled turn without a task")
        if task.status.state not in TERMINAL:
            canceled = pb.Task()
            canceled.CopyFrom(task)
            canceled.status.state = pb.TASK_STATE_CANCELED
            await self._manager.save_task_event(canceled)
            task = canceled
        return task

    async def stop(self) -> None:
        """Stop the run and wait for it (the adapter is closing)."""
        self.run.cancel()
        await asyncio.wait({self.run})

    async def follow(self) -> AsyncGenerator[Event, None]:
        """`SubscribeToTask` on this replica: the task as it stands, then each event applied
        after it, until one ends the turn or the run is over."""
        while self._task is None:  # stored, not yet recorded here
            if self._over:
                return
            await self._changed.wait()
        snapshot, seen = pb.Task(), len(self._events)
        snapshot.CopyFrom(self._task)
        yield snapshot
        while True:
            while seen < len(self._events):
                event = self._events[seen]
                seen += 1
                yield event
                if ends_turn(event):
                    return
            if self._over:
                return
            await self._changed.wait()


class _Applying(EventQueue):
    """The queue the executor's cancel writes to: applied even though a cancel has begun."""

    def __init__(self, turn: BlockingTurn) -> None:
        self._turn = turn

    async def enqueue_event(self, event: Event) -> None:
        await self._turn.apply(event)


class _Superseded(Exception):
    """Another writer made the task terminal: the run stops, the sender gets the task stored."""
