"""Where tasks and approvals live: in memory (one process, bounded) or in PostgreSQL (shared).

`open_stores(settings)` picks by `DATABASE_URL`. The contracts both kinds meet are in
`protocols.py`, the `ListTasks` rules they share in `listing.py`.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from a2a.server.cluster.event_stream import TaskEventStream

from adapter.settings import AdapterSettings
from adapter.stores.memory import BoundedTaskStore, MemoryConfirmationStore, MemoryMessageClaims
from adapter.stores.protocols import ConfirmationStore, MessageClaims, SdkTaskStore, TaskStore


@dataclass(frozen=True, slots=True)
class Stores:
    """The task, confirmation and claim stores, how to close them, and cross-replica task
    events."""

    tasks: TaskStore
    # The same task store as the a2a-sdk request handler takes it: the SDK's own store types are
    # nominal (an unversioned `TaskStore` or a `VersionedTaskStore`), not the protocol above.
    sdk_tasks: SdkTaskStore
    confirmations: ConfirmationStore
    claims: MessageClaims
    close: Callable[[], Awaitable[None]]
    events: TaskEventStream | None = None  # PostgreSQL only: the memory store is one process
    # The exceptions that mean the store cannot be reached (`adapter.outage`); memory never is.
    outage_errors: tuple[type[BaseException], ...] = ()


async def open_stores(
    settings: AdapterSettings, *, clock: Callable[[], float] = time.time
) -> Stores:
    """PostgreSQL when `DATABASE_URL` is set, otherwise bounded in-memory stores; approvals
    expire by `clock` (wall time: their `expires_at` is shown to people)."""
    if settings.database_url:
        from adapter.stores.postgres import (  # asyncpg only when it is used
            OUTAGE_ERRORS,
            PostgresStores,
        )

        shared = await PostgresStores.open(
            settings.database_url,
            settings.db_schema,
            clock=clock,
            idle_ttl=settings.task_idle_ttl,
            max_pending_per_owner=settings.max_pending_approvals_per_owner,
        )
        return Stores(
            shared.tasks,
            shared.tasks,
            shared.confirmations,
            shared.claims,
            shared.close,
            shared.events,
            OUTAGE_ERRORS,
        )
    tasks = BoundedTaskStore(
        max_tasks=settings.max_tasks,
        max_tasks_per_owner=settings.max_tasks_per_owner,
        idle_ttl=settings.task_idle_ttl,
    )
    # A turn makes one claim per message: room for a few turns per task kept.
    claims = MemoryMessageClaims(
        max_claims=4 * settings.max_tasks,
        max_claims_per_owner=4 * settings.max_tasks_per_owner,
        idle_ttl=settings.task_idle_ttl,
    )
    confirmations = MemoryConfirmationStore(
        clock=clock,
        max_entries=settings.max_approvals,
        max_pending_per_owner=settings.max_pending_approvals_per_owner,
    )
    return Stores(tasks, tasks, confirmations, claims, tasks.close)
