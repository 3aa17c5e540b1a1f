"""Retries: a message sent again gets its first answer, and its turn runs once.

Spec 3.3.1: "Send Message operations MAY be idempotent. Agents may utilize the messageId to detect
duplicate messages." A client that lost an answer (a timeout, a dropped connection) sends the same
message again; running its turn twice would ask the agent twice — and propose a guarded action
twice. So:

* A message is named by (principal, scope, `messageId`, content); the scope is the task the
  message names, or, for a message that starts a task, the `contextId` it was sent with (none is
  one scope too); the content is everything but the ids the server may fill in (`fingerprint`).
* The first send of a message claims it for its task (`MessageClaims`: one atomic claim, in memory
  or in PostgreSQL across replicas) and runs. Every other send of the same message in the same
  scope — a retry, or a duplicate racing the first — runs nothing: it is answered with that task
  once the message's turn is over (`returnImmediately`: at once), as the task then stands.
* The same id with another message (other content: parts, role, metadata…) is another message: it
  runs (docs/decisions.md, D9). The spec makes duplicate detection optional and never lets an
  agent refuse a send for its id, and clients do reuse ids (the A2A TCK sends one id with several
  messages): refusing them cost conformance, and a retry never changes its content.
* A message naming a task is also looked up in that task's history, which holds the task's first
  message (claimed in its context's scope) and messages from before claims were kept. The a2a-sdk
  keeps one message per id in a task's history, so a later message under an id already there runs
  but is not added to it; its turn is over when the task is no longer submitted or working.

A first send that fails before its message reaches its task gives its claim back, so a retry runs
it. A first send whose process died before it stored its task leaves a claim that no task
follows: `ORPHAN_SECONDS` after it was made, a retry takes the claim over and runs.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import uuid
from dataclasses import dataclass

from a2a.server.context import ServerCallContext
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import UnsupportedOperationError

from adapter.principal import owner_of
from adapter.stores.protocols import TERMINAL, MessageClaims, SdkTaskStore, TaskStore, read_task

POLL_SECONDS = 0.1  # how often a retry looks whether the first send's turn is over
ORPHAN_SECONDS = 30.0  # a claim this old whose task was never stored is taken over by a retry
_CLAIMED = "orrery.claimed"  # ServerCallContext.state: the `Claimed` of a first send
_RUNNING = frozenset({pb.TASK_STATE_SUBMITTED, pb.TASK_STATE_WORKING})


@dataclass(frozen=True, slots=True)
class Retry:
    """A send of a message seen before: answer `task_id` once the message's turn is over."""

    task_id: str
    message_id: str
    key: str | None  # the claim it was found by; None when found in the task's history


@dataclass(frozen=True, slots=True)
class Claimed:
    """What the first send of a message claimed (kept in its call context)."""

    key: str
    task_id: str
    new_task: bool  # the message starts the task `task_id` (the id the SDK must give it)


def fingerprint(message: pb.Message) -> str:
    """The message's content: everything but the ids the server may fill in."""
    content = pb.Message()
    content.CopyFrom(message)
    for field in ("message_id", "task_id", "context_id"):
        content.ClearField(field)
    return hashlib.sha256(content.SerializeToString(deterministic=True)).hexdigest()


def claim_key(scope: str, message_id: str, content: str) -> str:
    """A fixed-size key for (scope, messageId, content fingerprint): unambiguous, and storable
    whatever the id holds."""
    encoded = json.dumps([scope, message_id, content], ensure_ascii=True, separators=(",", ":"))
    return hashlib.sha256(encoded.encode("ascii")).hexdigest()


def new_task_id(context: ServerCallContext) -> str | None:
    """The id a first send that starts a task claimed for it (None for any other call)."""
    claimed = context.state.get(_CLAIMED)
    return claimed.task_id if isinstance(claimed, Claimed) and claimed.new_task else None


def refuse_terminal(task: pb.Task) -> None:
    """-32004 for a finished task (spec 3.1.1): it takes no more messages."""
    if task.status.state in TERMINAL:
        raise UnsupportedOperationError(
            message=f"Task {task.id} is in terminal state: {pb.TaskState.Name(task.status.state)}"
        )


def _sent(task: pb.Task, message_id: str) -> pb.Message | None:
    """The caller's message with this id in the task's history, if any (one at most: the SDK
    adds no second message under an id)."""
    found: pb.Message | None = next(
        (m for m in task.history if m.message_id == message_id and m.role == pb.ROLE_USER), None
    )
    return found


def _turn_over(task: pb.Task, message_id: str) -> bool:
    """True once the turn of `message_id` has ended on `task` (the SDK records the message in the
    history when the turn's outcome is applied)."""
    if task.status.state in TERMINAL:
        return True
    return _sent(task, message_id) is not None and task.status.state not in _RUNNING


class Retries:
    """Claims first sends and answers the others (see the module docstring)."""

    def __init__(
        self,
        claims: MessageClaims,
        tasks: TaskStore | SdkTaskStore,
        *,
        poll: float = POLL_SECONDS,
        orphan: float = ORPHAN_SECONDS,
    ) -> None:
        self._claims = claims
        self._tasks = tasks
        self._poll = poll
        self._orphan = orphan

    async def admit(self, message: pb.Message, context: ServerCallContext) -> Retry | None:
        """None for the first send of `message`: run it. A `Retry` for any other send of it.

        Raises -32004 for a first message to a finished task. A message naming a task that is not
        the caller's is left to the SDK, which answers -32001 before it builds anything.
        """
        fp = fingerprint(message)
        owner = owner_of(context)
        if message.task_id:
            task = await read_task(self._tasks, message.task_id, context)  # owner-scoped
            if task is None:
                return None
            earlier = _sent(task, message.message_id)
            if earlier is not None and fingerprint(earlier) == fp:
                return Retry(task.id, message.message_id, None)
            key, candidate = claim_key("task:" + task.id, message.message_id, fp), task.id
            if task.status.state in TERMINAL:
                # a retry of a message its history could not hold, once its turn ended the task
                claim = await self._claims.get(owner, key)
                if claim is not None and claim.task_id == task.id:
                    return Retry(task.id, message.message_id, key)
                refuse_terminal(task)
        else:
            key = claim_key("context:" + message.context_id, message.message_id, fp)
            candidate = str(uuid.uuid4())
        while True:
            claim = await self._claims.claim(owner, key, task_id=candidate, fingerprint=fp)
            if claim.mine:
                break
            if not await self._orphaned(claim.task_id, claim.age, context):
                return Retry(claim.task_id, message.message_id, key)
            if await self._claims.take_over(
                owner,
                key,
                stale=claim.task_id,
                task_id=candidate,
                fingerprint=fp,
                min_age=self._orphan,
            ):
                break
        context.state[_CLAIMED] = Claimed(key, candidate, new_task=not message.task_id)
        return None

    async def _orphaned(self, task_id: str, age: float, context: ServerCallContext) -> bool:
        return age >= self._orphan and await read_task(self._tasks, task_id, context) is None

    async def running(self, retry: Retry, context: ServerCallContext) -> pb.Task | None:
        """The retry's task as it stands while its message's turn still runs; None when the
        task is not stored yet or the turn is over."""
        task = await read_task(self._tasks, retry.task_id, context)
        return None if task is None or _turn_over(task, retry.message_id) else task

    async def answer(
        self, retry: Retry, context: ServerCallContext, *, wait: bool = True
    ) -> pb.Task | None:
        """The retry's task once its message's turn is over (with `wait` False: as soon as it is
        stored). None when the first send is gone (its claim given back or orphaned): admit the
        message again, it is a first send now."""
        owner = owner_of(context)
        while True:
            task = await read_task(self._tasks, retry.task_id, context)
            if task is not None and (not wait or _turn_over(task, retry.message_id)):
                return task
            if retry.key is None:
                if task is None:  # gone from the store since it was found: start over
                    return None
            else:
                claim = await self._claims.get(owner, retry.key)
                if claim is None or claim.task_id != retry.task_id:
                    return None
                if task is None and claim.age >= self._orphan:
                    return None
            await asyncio.sleep(self._poll)

    async def first_failed(self, message: pb.Message, context: ServerCallContext) -> None:
        """The first send of `message` raised: give its claim back unless the message reached its
        task (then its turn ran, and a retry is answered with that task)."""
        claimed = context.state.get(_CLAIMED)
        if not isinstance(claimed, Claimed):
            return
        task = await read_task(self._tasks, claimed.task_id, context)
        if task is not None and _sent(task, message.message_id) is not None:
            return
        await self._claims.release(owner_of(context), claimed.key, task_id=claimed.task_id)
