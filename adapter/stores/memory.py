"""The in-memory stores (the default, one process): bounded tasks, confirmations and claims.

Every task read and write is scoped by the owner — the verified principal key
(`principal.owner_of`) — so another owner's task is exactly as absent as a task that never
existed, in `GetTask`, `CancelTask`, `SubscribeToTask`, `SendMessage(taskId)` and in `ListTasks`
totals and page tokens (listing is filtered by owner before it is positioned or counted).

The SDK's `InMemoryTaskStore` never evicts. `BoundedTaskStore` drops a task idle (not read or
written) for `idle_ttl` seconds and keeps at most `max_tasks`, least recently used out first.
`MemoryConfirmationStore` keeps settled approvals an hour after they expire, and at most
`max_entries`. `MemoryMessageClaims` keeps a claim for `idle_ttl` seconds after it was made, and at
most `max_claims` (oldest first out): a retry after that runs as a new message.
"""

from __future__ import annotations

import dataclasses
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable

from a2a.server.context import ServerCallContext
from a2a.server.tasks import TaskStore
from a2a.types import a2a_pb2 as pb

from adapter.principal import owner_of
from adapter.stores.listing import ListQuery, page_response, sort_key
from adapter.stores.protocols import (
    Claim,
    Confirmation,
    Decision,
    DecisionOutcome,
    GateOutcome,
    Proposal,
    new_action_id,
)

_KEEP_DECIDED_SECONDS = 3600.0


def _copy(task: pb.Task) -> pb.Task:
    copied = pb.Task()
    copied.CopyFrom(task)
    return copied


class BoundedTaskStore(TaskStore):
    """In-memory, owner-scoped, bounded by idle time and count (see the module docstring)."""

    shared = False

    def __init__(
        self,
        *,
        max_tasks: int = 10000,
        idle_ttl: float = 3600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._max_tasks = max_tasks
        self._idle_ttl = idle_ttl
        self._clock = clock
        # (owner, task id) -> (task, last touched); ordered least recently used first.
        self._entries: OrderedDict[tuple[str, str], tuple[pb.Task, float]] = OrderedDict()
        self._by_owner: dict[str, set[str]] = {}

    def _drop(self, entry_key: tuple[str, str]) -> None:
        del self._entries[entry_key]
        owner, task_id = entry_key
        owned = self._by_owner[owner]
        owned.discard(task_id)
        if not owned:
            del self._by_owner[owner]

    def _evict(self, now: float) -> None:
        while self._entries:
            entry_key, (_, touched) = next(iter(self._entries.items()))
            if len(self._entries) <= self._max_tasks and now - touched < self._idle_ttl:
                return
            self._drop(entry_key)

    async def save(self, task: pb.Task, context: ServerCallContext) -> None:
        owner = owner_of(context)
        now = self._clock()
        entry_key = (owner, task.id)
        self._entries[entry_key] = (_copy(task), now)
        self._entries.move_to_end(entry_key)
        self._by_owner.setdefault(owner, set()).add(task.id)
        self._evict(now)

    async def get(self, task_id: str, context: ServerCallContext) -> pb.Task | None:
        entry_key = (owner_of(context), task_id)
        entry = self._entries.get(entry_key)
        if entry is None:
            return None
        now = self._clock()
        if now - entry[1] >= self._idle_ttl:
            self._drop(entry_key)
            return None
        self._entries[entry_key] = (entry[0], now)
        self._entries.move_to_end(entry_key)
        return _copy(entry[0])

    def _owned(self, owner: str, now: float) -> Iterable[pb.Task]:
        for task_id in self._by_owner.get(owner, ()):
            task, touched = self._entries[(owner, task_id)]
            if now - touched < self._idle_ttl:
                yield task

    async def list(
        self, params: pb.ListTasksRequest, context: ServerCallContext
    ) -> pb.ListTasksResponse:
        query = ListQuery.of(params)
        owner = owner_of(context)
        matching = sorted(
            (task for task in self._owned(owner, self._clock()) if query.matches(task)),
            key=sort_key,
            reverse=True,
        )
        start = 0
        if query.after is not None:
            after = query.after
            start = next(
                (i for i, task in enumerate(matching) if sort_key(task) < after), len(matching)
            )
        page = [_copy(task) for task in matching[start : start + query.page_size]]
        more = start + query.page_size < len(matching)
        return page_response(query, page, more, len(matching))

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        entry_key = (owner_of(context), task_id)
        if entry_key in self._entries:
            self._drop(entry_key)

    async def count(self) -> int:
        return len(self._entries)

    async def ping(self) -> None:
        return None

    async def close(self) -> None:
        return None


class MemoryConfirmationStore:
    """Confirmations in this process only (the default; not shared between replicas).

    Bounded: settled or expired entries are dropped an hour after they expire, and at most
    `max_entries` are kept (oldest first out).
    """

    shared = False

    def __init__(self, *, clock: Callable[[], float] = time.time, max_entries: int = 10000) -> None:
        self._clock = clock
        self._max_entries = max_entries
        self._entries: dict[str, Confirmation] = {}

    def _sweep(self, now: float) -> None:
        stale = [
            action_id
            for action_id, entry in self._entries.items()
            if entry.expires_at + _KEEP_DECIDED_SECONDS < now
        ]
        for action_id in stale:
            del self._entries[action_id]
        while len(self._entries) >= self._max_entries:
            del self._entries[next(iter(self._entries))]

    async def propose(self, proposal: Proposal) -> Confirmation:
        now = self._clock()
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
        updated = dataclasses.replace(entry, status=status)  # type: ignore[arg-type]
        self._entries[entry.action_id] = updated
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


class MemoryMessageClaims:
    """Message claims in this process only (see `MessageClaims` and the module docstring)."""

    shared = False

    def __init__(
        self,
        *,
        max_claims: int = 40000,
        idle_ttl: float = 3600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._max_claims = max_claims
        self._idle_ttl = idle_ttl
        self._clock = clock
        # (owner, key) -> (task id, fingerprint, made at); ordered oldest first.
        self._entries: OrderedDict[tuple[str, str], tuple[str, str, float]] = OrderedDict()

    def _sweep(self, now: float) -> None:
        while self._entries:
            made = next(iter(self._entries.values()))[2]
            if len(self._entries) < self._max_claims and now - made < self._idle_ttl:
                return
            self._entries.popitem(last=False)

    async def claim(self, owner: str, key: str, *, task_id: str, fingerprint: str) -> Claim:
        now = self._clock()
        self._sweep(now)
        entry = self._entries.get((owner, key))
        if entry is not None:
            return Claim(entry[0], entry[1], now - entry[2])
        self._entries[(owner, key)] = (task_id, fingerprint, now)
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
        return True

    async def release(self, owner: str, key: str, *, task_id: str) -> None:
        entry = self._entries.get((owner, key))
        if entry is not None and entry[0] == task_id:
            del self._entries[(owner, key)]
