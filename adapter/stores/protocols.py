"""What the adapter needs of its stores, whichever backs them (memory or PostgreSQL).

Two contracts live here, with the values both of their implementations share:

* `TaskStore`: owner-scoped tasks. The a2a-sdk request handler runs turns against the same object
  through the SDK's own store contract (`SdkTaskStore`): the memory store is an unversioned SDK
  `TaskStore` (the SDK wraps it), the PostgreSQL store a `VersionedTaskStore` whose every write is
  a compare-and-swap. `TERMINAL` is the set of states no write changes, `INTERRUPTED` the states
  of a task that waits for its client.
* `ConfirmationStore`: guarded actions and the human decisions on them, plus the `Confirmation` and
  `Proposal` rows it takes and gives. Gateways use it through the gateway seam, which re-exports
  these names (`adapter.gateway`).
* `MessageClaims`: which task each message (by `messageId`, in its scope) belongs to, so that a
  retried send finds its first answer instead of running again (`retries.py`).

Nothing here imports the rest of the adapter: of it, a store needs only this module, the listing
rules (`listing.py`) and the owner of a call (`principal.owner_of`).
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeAlias, runtime_checkable

from a2a.server.cluster.task_store import StoredTask, VersionedTaskStore
from a2a.server.context import ServerCallContext
from a2a.server.tasks import TaskStore as UnversionedTaskStore
from a2a.types import a2a_pb2 as pb

SdkTaskStore: TypeAlias = UnversionedTaskStore | VersionedTaskStore

TERMINAL = frozenset(
    {
        pb.TASK_STATE_COMPLETED,
        pb.TASK_STATE_FAILED,
        pb.TASK_STATE_CANCELED,
        pb.TASK_STATE_REJECTED,
    }
)
# A task waiting for its client (spec 3.1): not over, but no turn runs on it.
INTERRUPTED = frozenset({pb.TASK_STATE_INPUT_REQUIRED, pb.TASK_STATE_AUTH_REQUIRED})
# A task in one of these states has a turn running on it — or had one that is gone (`end_stale`).
RUNNING = frozenset({pb.TASK_STATE_SUBMITTED, pb.TASK_STATE_WORKING})


class TaskStore(Protocol):
    """Owner-scoped tasks: another owner's task is exactly as absent as one that never existed.

    The owner is the verified principal key of the call (`principal.owner_of(context)`); a context
    without one makes every member raise.
    """

    @property
    def shared(self) -> bool:
        """True when every replica sees the same tasks."""

    async def get(self, task_id: str, context: ServerCallContext) -> pb.Task | StoredTask | None:
        """The caller's task (with its version, if the store keeps versions), or None."""

    async def list(
        self, params: pb.ListTasksRequest, context: ServerCallContext
    ) -> pb.ListTasksResponse:
        """The caller's tasks by the `ListTasks` rules (`listing.ListQuery`)."""

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        """Forget the caller's task (nothing happens to another owner's)."""

    async def admit(self, owner: str) -> None:
        """Make room for a new task of `owner`'s, or raise the refusal (`TaskQuotaExceeded`,
        `TaskStoreFull`) before its turn runs; a store without quotas does nothing."""

    async def count(self) -> int:
        """Tasks stored, all owners (for the `tasks_stored` gauge)."""

    async def end_stale(
        self, older_than: float, ended: Callable[[pb.Task], pb.TaskStatus], *, limit: int
    ) -> int:
        """Give at most `limit` tasks still `RUNNING` whose status is over `older_than` seconds
        old (all owners) the status `ended(task)`, as any other update (PostgreSQL: a
        compare-and-swap, with its event in the shared log for every replica's subscribers; a
        task that moved on meanwhile is left alone). How many were ended."""

    async def ping(self) -> None:
        """Raise if the store cannot be reached (readiness)."""


async def read_task(
    store: TaskStore | SdkTaskStore, task_id: str, context: ServerCallContext
) -> pb.Task | None:
    """The caller's task as it is stored now, without its version (either kind of store)."""
    stored = await store.get(task_id, context)
    return stored.task if isinstance(stored, StoredTask) else stored


Status = Literal["pending", "approved", "denied", "consumed", "expired", "withdrawn"]
Decision = Literal["approve", "deny"]
# What deciding answered: the new state, or why nothing changed.
DecisionOutcome = Literal[
    "approved", "denied", "not_found", "expired", "already_decided", "withdrawn"
]
# What the gate found when a turn resumed: "approved" means it consumed the approval just now;
# "mismatch" that the action about to run is not the one approved (nothing was consumed).
GateOutcome = Literal[
    "approved", "denied", "pending", "expired", "consumed", "withdrawn", "not_found", "mismatch"
]


def action_digest(tool: str, args: Mapping[str, Any]) -> str:
    """SHA-256 of the exact action: the tool and its *unredacted* arguments as canonical JSON
    (sorted keys, no spaces, UTF-8). An approval records it when the action is proposed, and the
    gate lets only an action with the same digest run on it."""
    canonical = json.dumps(
        {"tool": tool, "args": args},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Confirmation:
    """A guarded action waiting for (or past) a human decision."""

    action_id: str
    owner: str  # principal key of the agent that proposed it
    subject: str  # the delegating human: the only one who may decide
    session_id: str
    task_id: str
    tool: str
    args: Mapping[str, Any]  # already redacted
    level: str
    status: Status
    created_at: float
    expires_at: float
    digest: str  # `action_digest` of the exact action proposed: the only one the approval runs


@dataclass(frozen=True, slots=True)
class Proposal:
    """A guarded action a gateway wants a human to decide (`args` redacted by the gateway: what
    the person is shown), bound to the exact action by `digest`."""

    owner: str  # principal key of the proposing agent: only its turns may consume the approval
    subject: str  # the delegating human: the only one who may decide
    session_id: str
    task_id: str
    tool: str
    args: Mapping[str, Any]
    level: str
    ttl: float  # seconds until both the decision and the consumption expire
    digest: str  # `action_digest(tool, exact args)`: what the gate compares at consumption


@runtime_checkable
class ConfirmationStore(Protocol):
    """Where pending guarded actions and their decisions live (memory or PostgreSQL)."""

    @property
    def shared(self) -> bool:
        """True when every replica sees the same confirmations."""

    async def propose(self, proposal: Proposal) -> Confirmation:
        """Record a new pending action; its id is unguessable. Raises `ApprovalRefused`
        (`adapter.errors`) when the proposing owner's quota of live actions is used up, or the
        store is full of live actions: a live action is never dropped to make room."""

    async def get(self, action_id: str, *, subject: str) -> Confirmation | None:
        """The action if `subject` may decide it (otherwise None, as if it did not exist)."""

    async def decide(self, action_id: str, *, subject: str, decision: Decision) -> DecisionOutcome:
        """Approve or deny a pending, unexpired action of `subject`'s; once."""

    async def consume(self, action_id: str, *, owner: str, digest: str) -> GateOutcome:
        """The gate: turn an approval of `owner`'s action into one execution of that action.

        `digest` is the `action_digest` of the action about to run; unless it equals the one
        recorded at the proposal, the answer is `mismatch` and nothing is consumed."""

    async def withdraw(self, action_id: str, *, owner: str) -> None:
        """`owner` cancelled the task waiting on this action: a pending or approved action
        becomes `withdrawn` — never to run, and a later decision is told so."""

    async def ping(self) -> None:
        """Raise if the store cannot be reached (readiness)."""

    async def pending(self) -> int:
        """How many actions (of every subject) wait for a decision and have not expired (the
        `orrery_a2a_approvals_pending` gauge, read at scrape time)."""


@dataclass(frozen=True, slots=True)
class Claim:
    """The task a message belongs to: claimed by the first send of it, found by its retries."""

    task_id: str
    fingerprint: str  # of the message's content (part of the key too): what was claimed
    age: float  # seconds since the claim was made (or taken over), by the store's clock
    mine: bool = False  # True only for the `claim` call that made it


class MessageClaims(Protocol):
    """Claims of messages on tasks, per owner; `key` names the message in its scope.

    A claim is made once, atomically, by the first send of a message; every other send of it
    (a retry, or a duplicate racing the first) is told whose it is. Claims are dropped with the
    tasks they name (idle TTL) and when a first send never reached its task (`release`).
    """

    @property
    def shared(self) -> bool:
        """True when every replica sees the same claims."""

    async def claim(self, owner: str, key: str, *, task_id: str, fingerprint: str) -> Claim:
        """Claim `key` for `task_id` unless it is claimed already: the claim that holds (`mine`
        when this call made it)."""

    async def get(self, owner: str, key: str) -> Claim | None:
        """The claim on `key`, if any."""

    async def take_over(
        self, owner: str, key: str, *, stale: str, task_id: str, fingerprint: str, min_age: float
    ) -> bool:
        """Move the claim from task `stale` to `task_id` if it still names `stale` and is at
        least `min_age` seconds old (its send died before its task was stored); True if moved."""

    async def release(self, owner: str, key: str, *, task_id: str) -> None:
        """Drop the claim if it still names `task_id` (its send never reached the task)."""


def new_action_id() -> str:
    """144 random bits, URL-safe: the id is also the approval URL, so it must be unguessable."""
    return secrets.token_urlsafe(18)
