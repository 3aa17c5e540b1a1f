"""The in-memory stores (the default, one process): bounded tasks, confirmations and claims.

Every task read and write is scoped by the owner — the verified principal key
(`principal.owner_of`) — so another owner's task is exactly as absent as a task that never
existed, in `GetTask`, `CancelTask`, `SubscribeToTask`, `SendMessage(taskId)` and in `ListTasks`
totals and page tokens (listing is filtered by owner before it is positioned or counted).

The SDK's `InMemoryTaskStore` never evicts. `BoundedTaskStore` drops a task idle (not read or
written) for `idle_ttl` seconds, keeps at most `max_tasks_per_owner` of one owner's and
`max_tasks` in all, and makes room only by dropping a *finished* (terminal) task, least recently
used first — the owner's own when the owner is at its quota. A waiting or running task is never
dropped for room: one owner's flood cannot push out another owner's input-required task. When
nothing may go, `admit` refuses the new task before its turn runs (429 `task_quota_exceeded` for
the owner's quota, 503 `task_store_full` for the store's). `ListTasks` reads ordered per-owner
indexes (`task_index.py`): no scan or sort of the owner's tasks per call.
`MemoryConfirmationStore` keeps settled approvals an hour after they expire, and at most
`max_entries`, never dropping a live one (it refuses a new proposal instead), and at most
`max_pending_per_owner` live ones per proposing owner. `MemoryMessageClaims` keeps a claim for
`idle_ttl` seconds after it was made, at most `max_claims_per_owner` per owner (its own oldest
first out) and `max_claims` in all (oldest first out): a retry after that runs as a new message.
"""

from __future__ import annotations

import dataclasses
import time
from collections import OrderedDict
from collections.abc import Callable

from a2a.server.context import ServerCallContext
from a2a.server.tasks import TaskStore
from a2a.types import a2a_pb2 as pb

from adapter.errors import (
    ApprovalQuotaExceeded,
    ApprovalStoreFull,
    OverCap,
    TaskQuotaExceeded,
    TaskStoreFull,
)
from adapter.principal import owner_of
from adapter.stores.listing import ListQuery, page_response, sort_key
from adapter.stores.protocols import (
    RUNNING,
    TERMINAL,
    Claim,
    Confirmation,
    Decision,
    DecisionOutcome,
    GateOutcome,
    Proposal,
    new_action_id,
)
from adapter.stores.task_index import TaskIndex

_KEEP_DECIDED_SECONDS = 3600.0
_LIVE_STATUSES = frozenset({"pending", "approved"})


_Key = tuple[str, str]  # (owner, task id)
# A quota frees up when a turn ends or a task is cancelled: seconds, not minutes.
TASK_QUOTA_RETRY_AFTER = 5


def _copy(task: pb.Task) -> pb.Task:
    copied = pb.Task()
    copied.CopyFrom(task)
    return copied


class BoundedTaskStore(TaskStore):
    """In-memory, owner-scoped, bounded by idle time, per owner and in all (module docstring)."""

    shared = False

    def __init__(
        self,
        *,
        max_tasks: int = 10000,
        max_tasks_per_owner: int = 1000,
        idle_ttl: float = 3600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._max_tasks = max_tasks
        self._per_owner = min(max_tasks_per_owner, max_tasks)
        self._idle_ttl = idle_ttl
        self._clock = clock
        # (owner, task id) -> (task, last touched); ordered least recently used first.
        self._entries: OrderedDict[_Key, tuple[pb.Task, float]] = OrderedDict()
        self._owned: dict[str, int] = {}  # owner -> tasks kept
        # Finished (terminal) tasks, least recently used first: the only ones room is made from.
        self._finished: OrderedDict[_Key, None] = OrderedDict()
        self._finished_by_owner: dict[str, OrderedDict[str, None]] = {}
        self._index = TaskIndex()
        self._running: set[_Key] = set()  # entries in a RUNNING state (`end_stale`)

    def _index_add(self, entry_key: _Key, task: pb.Task) -> None:
        owner, task_id = entry_key
        self._index.add(owner, task.context_id, task.status.state, sort_key(task))
        if task.status.state in RUNNING:
            self._running.add(entry_key)
        if task.status.state in TERMINAL:
            self._finished[entry_key] = None
            self._finished_by_owner.setdefault(owner, OrderedDict())[task_id] = None

    def _index_remove(self, entry_key: _Key, task: pb.Task) -> None:
        owner, task_id = entry_key
        self._index.remove(owner, task.context_id, task.status.state, sort_key(task))
        self._running.discard(entry_key)
        if entry_key in self._finished:
            del self._finished[entry_key]
            finished = self._finished_by_owner[owner]
            del finished[task_id]
            if not finished:
                del self._finished_by_owner[owner]

    def _touch(self, entry_key: _Key, task: pb.Task, now: float) -> None:
        self._entries[entry_key] = (task, now)
        self._entries.move_to_end(entry_key)
        if entry_key in self._finished:
            self._finished.move_to_end(entry_key)
            self._finished_by_owner[entry_key[0]].move_to_end(entry_key[1])

    def _drop(self, entry_key: _Key) -> None:
        task, _ = self._entries.pop(entry_key)
        self._index_remove(entry_key, task)
        owner = entry_key[0]
        self._owned[owner] -= 1
        if not self._owned[owner]:
            del self._owned[owner]

    def _drop_idle(self, now: float) -> None:
        while self._entries:
            entry_key, (_, touched) = next(iter(self._entries.items()))
            if now - touched < self._idle_ttl:
                return
            self._drop(entry_key)

    def _room(self, owner: str) -> type[OverCap] | None:
        """Make room for a new task of `owner`'s by dropping a finished task (the owner's own
        when the owner is at its quota); the refusal to raise when nothing may go."""
        if self._owned.get(owner, 0) >= self._per_owner:
            finished = self._finished_by_owner.get(owner)
            if not finished:
                return TaskQuotaExceeded
            self._drop((owner, next(iter(finished))))
        if len(self._entries) >= self._max_tasks:
            if not self._finished:
                return TaskStoreFull
            self._drop(next(iter(self._finished)))
        return None

    async def admit(self, owner: str) -> None:
        self._drop_idle(self._clock())
        refusal = self._room(owner)
        if refusal is TaskQuotaExceeded:
            raise TaskQuotaExceeded(
                f"this principal already has {self._per_owner} unfinished tasks kept; finish or"
                " cancel one first",
                retry_after=TASK_QUOTA_RETRY_AFTER,
                limit=self._per_owner,
            )
        if refusal is TaskStoreFull:
            raise TaskStoreFull(
                "the task store is full of unfinished tasks; retry later",
                retry_after=TASK_QUOTA_RETRY_AFTER,
                limit=self._max_tasks,
            )

    async def save(self, task: pb.Task, context: ServerCallContext) -> None:
        owner = owner_of(context)
        now = self._clock()
        self._drop_idle(now)
        entry_key = (owner, task.id)
        old = self._entries.get(entry_key)
        if old is None:
            # Admitted before its turn began (`admit`); a new task of a turn admitted while the
            # store filled up is kept all the same (over the bound by at most the turns in flight).
            self._room(owner)
            self._owned[owner] = self._owned.get(owner, 0) + 1
        else:
            self._index_remove(entry_key, old[0])
        stored = _copy(task)
        self._index_add(entry_key, stored)
        self._touch(entry_key, stored, now)

    async def get(self, task_id: str, context: ServerCallContext) -> pb.Task | None:
        entry_key = (owner_of(context), task_id)
        entry = self._entries.get(entry_key)
        if entry is None:
            return None
        now = self._clock()
        if now - entry[1] >= self._idle_ttl:
            self._drop(entry_key)
            return None
        self._touch(entry_key, entry[0], now)
        return _copy(entry[0])

    async def list(
        self, params: pb.ListTasksRequest, context: ServerCallContext
    ) -> pb.ListTasksResponse:
        query = ListQuery.of(params)
        owner = owner_of(context)
        self._drop_idle(self._clock())
        keys, total = self._index.select(owner, query)
        page = [_copy(self._entries[(owner, key[2])][0]) for key in keys[: query.page_size]]
        return page_response(query, page, len(keys) > query.page_size, total)

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        entry_key = (owner_of(context), task_id)
        if entry_key in self._entries:
            self._drop(entry_key)

    async def count(self) -> int:
        return len(self._entries)

    async def end_stale(
        self, older_than: float, ended: Callable[[pb.Task], pb.TaskStatus], *, limit: int
    ) -> int:
        # By the status's own time (wall clock): reads move a task's LRU stamp, not its status.
        cutoff_ns = int((time.time() - older_than) * 1e9)
        stale = [
            entry_key
            for entry_key in self._running
            if self._entries[entry_key][0].status.timestamp.ToNanoseconds() < cutoff_ns
        ][:limit]
        for entry_key in stale:
            task, touched = self._entries[entry_key]
            ended_task = _copy(task)
            ended_task.status.CopyFrom(ended(task))
            self._index_remove(entry_key, task)
            self._index_add(entry_key, ended_task)
            self._entries[entry_key] = (ended_task, touched)
        return len(stale)

    async def ping(self) -> None:
        return None

    async def close(self) -> None:
        return None


class MemoryConfirmationStore:
    """Confirmations in this process only (the default; not shared between replicas).

    Bounded: settled or expired entries are dropped an hour after they expire, and at most
    `max_entries` are kept. Room is made only from entries that can no longer run (decided,
    consumed, withdrawn, expired), oldest first; a *live* one (pending, or approved and not yet
    run, and unexpired) is never dropped: a new proposal is refused instead (`ApprovalStoreFull`),
    as is one from an owner that already has `max_pending_per_owner` live ones
    (`ApprovalQuotaExceeded`).
    """

    shared = False

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.time,
        max_entries: int = 10000,
        max_pending_per_owner: int = 100,
    ) -> None:
        self._clock = clock
        self._max_entries = max_entries
        self._per_owner = max_pending_per_owner
        self._entries: dict[str, Confirmation] = {}
        self._live_by_owner: dict[str, set[str]] = {}  # owner -> ids that were live when seen

    def _sweep(self, now: float) -> None:
        stale = [
            action_id
            for action_id, entry in self._entries.items()
            if entry.expires_at + _KEEP_DECIDED_SECONDS < now
        ]
        for action_id in stale:
            self._forget(action_id)
        if len(self._entries) < self._max_entries:
            return
        settled = next((key for key, entry in self._entries.items() if not _live(entry, now)), None)
        if settled is None:
            raise ApprovalStoreFull(limit=self._max_entries)
        self._forget(settled)

    def _forget(self, action_id: str) -> None:
        entry = self._entries.pop(action_id)
        self._unmark(entry)

    def _unmark(self, entry: Confirmation) -> None:
        live = self._live_by_owner.get(entry.owner)
        if live is not None:
            live.discard(entry.action_id)
            if not live:
                del self._live_by_owner[entry.owner]

    def _live_count(self, owner: str, now: float) -> int:
        live = self._live_by_owner.get(owner, set())
        for action_id in [a for a in live if not _live(self._entries[a], now)]:
            live.discard(action_id)
        return len(live)

    async def propose(self, proposal: Proposal) -> Confirmation:
        now = self._clock()
        if self._live_count(proposal.owner, now) >= self._per_owner:
            raise ApprovalQuotaExceeded(limit=self._per_owner)
        self._sweep(now)
        entry = Confirmation(
            action_id=new_action_id(),
            owner=proposal.owner,
            subject=proposal.subject,
            session_id=proposal.session_id,
            task_id=proposal.task_id,
            tool=proposal.tool,
            args=dict(proposal.args),
            level=proposal.level,
            status="pending",
            created_at=now,
            expires_at=now + proposal.ttl,
            digest=proposal.digest,
        )
        self._entries[entry.action_id] = entry
        self._live_by_owner.setdefault(entry.owner, set()).add(entry.action_id)
        return entry

    async def get(self, action_id: str, *, subject: str) -> Confirmation | None:
        entry = self._entries.get(action_id)
        # Plain comparisons: subjects and owners are not secrets (the action id is), and a
        # subject may be any Unicode string, which compare_digest refuses with a TypeError.
        if entry is None or entry.subject != subject:
            return None
        if entry.status == "pending" and self._clock() >= entry.expires_at:
            entry = self._set(entry, "expired")
        return entry

    async def pending(self) -> int:
        now = self._clock()
        return sum(
            1
            for entry in self._entries.values()
            if entry.status == "pending" and entry.expires_at > now
        )

    def _set(self, entry: Confirmation, status: str) -> Confirmation:
        # `status` is one of Confirmation's literals; the callers pass only those
        updated = dataclasses.replace(entry, status=status)  # type: ignore[arg-type]
        self._entries[entry.action_id] = updated
        if status not in _LIVE_STATUSES:
            self._unmark(updated)
        return updated

    async def decide(self, action_id: str, *, subject: str, decision: Decision) -> DecisionOutcome:
        entry = await self.get(action_id, subject=subject)
        if entry is None:
            return "not_found"
        if entry.status in ("expired", "withdrawn"):
            return entry.status
        if entry.status != "pending":
            return "already_decided"
        outcome: DecisionOutcome = "approved" if decision == "approve" else "denied"
        self._set(entry, outcome)
        return outcome

    async def consume(self, action_id: str, *, owner: str, digest: str) -> GateOutcome:
        entry = self._entries.get(action_id)
        if entry is None or entry.owner != owner:
            return "not_found"
        if entry.status in ("pending", "approved") and self._clock() >= entry.expires_at:
            self._set(entry, "expired")
            return "expired"
        if entry.status == "approved" and digest != entry.digest:
            return "mismatch"
        if entry.status == "approved":
            self._set(entry, "consumed")
            return "approved"
        return entry.status

    async def withdraw(self, action_id: str, *, owner: str) -> None:
        entry = self._entries.get(action_id)
        if entry is not None and entry.owner == owner and entry.status in ("pending", "approved"):
            self._set(entry, "withdrawn")

    async def ping(self) -> None:
        return None


def _live(entry: Confirmation, now: float) -> bool:
    """Still able to run: waiting for its decision, or approved and not yet consumed."""
    return entry.status in _LIVE_STATUSES and entry.expires_at > now


class MemoryMessageClaims:
    """Message claims in this process only (see `MessageClaims` and the module docstring).

    At most `max_claims` in all and `max_claims_per_owner` per owner: an owner at its share loses
    its own oldest claim, so one owner's flood of messages cannot make another owner's retry run
    its turn twice."""

    shared = False

    def __init__(
        self,
        *,
        max_claims: int = 40000,
        max_claims_per_owner: int = 4000,
        idle_ttl: float = 3600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._max_claims = max_claims
        self._per_owner = max_claims_per_owner
        self._idle_ttl = idle_ttl
        self._clock = clock
        # (owner, key) -> (task id, fingerprint, made at); ordered oldest first.
        self._entries: OrderedDict[tuple[str, str], tuple[str, str, float]] = OrderedDict()
        self._by_owner: dict[str, OrderedDict[str, None]] = {}  # owner -> keys, oldest first

    def _forget(self, owner: str, key: str) -> None:
        del self._entries[(owner, key)]
        keys = self._by_owner[owner]
        del keys[key]
        if not keys:
            del self._by_owner[owner]

    def _sweep(self, now: float, owner: str) -> None:
        while self._entries:
            (oldest_owner, oldest_key), (_, _, made) = next(iter(self._entries.items()))
            if len(self._entries) < self._max_claims and now - made < self._idle_ttl:
                break
            self._forget(oldest_owner, oldest_key)
        keys = self._by_owner.get(owner)
        if keys is not None and len(keys) >= self._per_owner:
            self._forget(owner, next(iter(keys)))

    async def claim(self, owner: str, key: str, *, task_id: str, fingerprint: str) -> Claim:
        now = self._clock()
        entry = self._entries.get((owner, key))
        if entry is not None and now - entry[2] < self._idle_ttl:
            return Claim(entry[0], entry[1], now - entry[2])
        if entry is not None:
            self._forget(owner, key)
        self._sweep(now, owner)
        self._entries[(owner, key)] = (task_id, fingerprint, now)
        self._by_owner.setdefault(owner, OrderedDict())[key] = None
        return Claim(task_id, fingerprint, 0.0, mine=True)

    async def get(self, owner: str, key: str) -> Claim | None:
        entry = self._entries.get((owner, key))
        if entry is None:
            return None
        return Claim(entry[0], entry[1], self._clock() - entry[2])

    async def take_over(
        self, owner: str, key: str, *, stale: str, task_id: str, fingerprint: str, min_age: float
    ) -> bool:
        now = self._clock()
        entry = self._entries.get((owner, key))
        if entry is None or entry[0] != stale or now - entry[2] < min_age:
            return False
        self._entries[(owner, key)] = (task_id, fingerprint, now)
        self._entries.move_to_end((owner, key))
        self._by_owner[owner].move_to_end(key)
        return True

    async def release(self, owner: str, key: str, *, task_id: str) -> None:
        entry = self._entries.get((owner, key))
        if entry is not None and entry[0] == task_id:
            self._forget(owner, key)
