"""`Turns`, the one owner of a turn's in-flight slot: taken at admission, given back once, when both
the request and the executor's run of the turn are over."""

from __future__ import annotations

import asyncio

import pytest
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events import EventQueue
from a2a.server.events.event_queue_v2 import EventQueueSource

from adapter.errors import TooManyInFlight
from adapter.limits import MemoryLimiter
from adapter.metrics import Metrics
from adapter.turns import Turns

KEY = "principal-key"


class HeldRun(AgentExecutor):
    """An executor whose run lasts until `finish` is set (and then raises `error`, if any)."""

    def __init__(self, error: Exception | None = None) -> None:
        self.started = asyncio.Event()
        self.finish = asyncio.Event()
        self.error = error

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        self.started.set()
        await self.finish.wait()
        if self.error is not None:
            raise self.error

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        raise NotImplementedError


def new_turns() -> tuple[Turns, MemoryLimiter, Metrics]:
    limiter, metrics = MemoryLimiter(1), Metrics()
    return Turns(limiter, metrics), limiter, metrics


def gauge(metrics: Metrics) -> float | None:
    return metrics.registry.get_sample_value("orrery_a2a_turns_in_flight")


def run(turns: Turns, inner: HeldRun, context: ServerCallContext) -> asyncio.Task[None]:
    """What the SDK does with a turn: run the (wrapped) executor in a task of its own."""

    async def execute() -> None:
        queue = EventQueueSource()
        try:
            await turns.executor(inner).execute(RequestContext(call_context=context), queue)
        finally:
            await queue.close(immediate=True)

    return asyncio.create_task(execute())


async def outliving_run(turns: Turns, inner: HeldRun) -> asyncio.Task[None]:
    """Admit a turn, start its run, and answer its request while the run goes on."""
    context = ServerCallContext()
    async with turns.admitted(KEY, context):
        running = run(turns, inner, context)
        await inner.started.wait()
    return running


async def test_a_request_whose_turn_never_ran_releases_the_slot_at_its_end() -> None:
    """The SDK refused the message before running it: the request's end frees the slot."""
    turns, limiter, metrics = new_turns()
    async with turns.admitted(KEY, ServerCallContext()):
        assert limiter.in_flight() == 1 and gauge(metrics) == 1
    assert limiter.in_flight() == 0 and gauge(metrics) == 0


async def test_a_request_that_fails_releases_the_slot() -> None:
    """An error out of the request (its turn never ran) frees the slot."""
    turns, limiter, _ = new_turns()
    with pytest.raises(RuntimeError):
        async with turns.admitted(KEY, ServerCallContext()):
            raise RuntimeError("handler failed")
    assert limiter.in_flight() == 0


async def test_a_run_that_outlives_its_request_keeps_the_slot_until_it_ends() -> None:
    """returnImmediately, a client gone or a drained stream: the turn still counts while it runs."""
    turns, limiter, _ = new_turns()
    inner = HeldRun()
    running = await outliving_run(turns, inner)
    assert limiter.in_flight() == 1
    with pytest.raises(TooManyInFlight):
        await limiter.acquire(KEY)
    inner.finish.set()
    await running
    assert limiter.in_flight() == 0


async def test_a_run_that_ends_first_leaves_the_slot_to_its_request() -> None:
    """A unary turn: the run is over, but the slot is freed when the answer has gone."""
    turns, limiter, _ = new_turns()
    context, inner = ServerCallContext(), HeldRun()
    inner.finish.set()
    async with turns.admitted(KEY, context):
        await run(turns, inner, context)
        assert limiter.in_flight() == 1
    assert limiter.in_flight() == 0


async def test_a_run_that_raises_releases_the_slot() -> None:
    """A turn whose executor fails is over: its slot is freed."""
    turns, limiter, _ = new_turns()
    inner = HeldRun(RuntimeError("gateway failed"))
    running = await outliving_run(turns, inner)
    inner.finish.set()
    with pytest.raises(RuntimeError):
        await running
    assert limiter.in_flight() == 0


async def test_a_cancelled_run_releases_the_slot() -> None:
    """Shutdown cancels the runs still going (after their streams were drained): slots come back."""
    turns, limiter, _ = new_turns()
    running = await outliving_run(turns, HeldRun())
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    assert limiter.in_flight() == 0


async def test_a_run_after_its_request_let_go_takes_nothing_and_frees_nothing() -> None:
    """A run queued until after its request ended is not counted, and frees no other turn's slot."""
    turns, limiter, _ = new_turns()
    late_context, late = ServerCallContext(), HeldRun()
    async with turns.admitted(KEY, late_context):
        pass
    other = ServerCallContext()
    async with turns.admitted(KEY, other):
        late.finish.set()
        await run(turns, late, late_context)
        assert limiter.in_flight() == 1
    assert limiter.in_flight() == 0


async def test_over_the_cap_nothing_is_held() -> None:
    """A refused admission leaves no turn behind: the next one after the first ends is admitted."""
    turns, limiter, metrics = new_turns()
    async with turns.admitted(KEY, ServerCallContext()):
        with pytest.raises(TooManyInFlight):
            async with turns.admitted(KEY, ServerCallContext()):
                pass
        assert limiter.in_flight() == 1
    async with turns.admitted(KEY, ServerCallContext()):
        assert gauge(metrics) == 1
    assert limiter.in_flight() == 0
