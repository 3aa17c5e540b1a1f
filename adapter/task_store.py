"""Owner-scoped task storage: the bounded in-memory store and the listing rules both stores share.

Every read and write is scoped by the owner — the verified principal key (`principal.owner_of`) —
so another owner's task is exactly as absent as a task that never existed, in `GetTask`,
`CancelTask`, `SubscribeToTask`, `SendMessage(taskId)` and in `ListTasks` totals and page tokens
(a page token only carries the position of the caller's own last task; listing is filtered by
owner before it is positioned or counted).

The SDK's `InMemoryTaskStore` never evicts. `BoundedTaskStore` drops a task idle (not read or
written) for `idle_ttl` seconds and keeps at most `max_tasks`, least recently used out first.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from a2a.server.context import ServerCallContext
from a2a.server.tasks import TaskStore
from a2a.types import a2a_pb2 as pb
from a2a.utils.constants import DEFAULT_LIST_TASKS_PAGE_SIZE
from a2a.utils.errors import InvalidParamsError
from a2a.utils.task import ListTasksCursor, decode_list_tasks_cursor, encode_list_tasks_cursor

from adapter.principal import owner_of

SortKey = tuple[bool, int, str]


def sort_key(task: pb.Task) -> SortKey:
    """`ListTasks` order (newest status first): (has timestamp, timestamp ns, id), descending."""
    has_timestamp = task.status.HasField("timestamp")
    return (has_timestamp, task.status.timestamp.ToNanoseconds() if has_timestamp else 0, task.id)


@dataclass(frozen=True, slots=True)
class ListQuery:
    """A `ListTasksRequest` resolved into filters, a start position and a page size."""

    context_id: str
    state: int
    updated_after_ns: int | None
    after: SortKey | None
    page_size: int

    @classmethod
    def of(cls, params: pb.ListTasksRequest) -> ListQuery:
        after = None
        if params.page_token:
            cursor = decode_list_tasks_cursor(params.page_token)
            if cursor is None:
                raise InvalidParamsError(message="invalid page token")
            after = cursor.sort_key()
        return cls(
            context_id=params.context_id,
            state=params.status,
            updated_after_ns=(
                params.status_timestamp_after.ToNanoseconds()
                if params.HasField("status_timestamp_after")
                else None
            ),
            after=after,
            page_size=params.page_size or DEFAULT_LIST_TASKS_PAGE_SIZE,
        )

    def matches(self, task: pb.Task) -> bool:
        if self.context_id and task.context_id != self.context_id:
            return False
        if self.state and task.status.state != self.state:
            return False
        if self.updated_after_ns is not None:
            key = sort_key(task)
            return key[0] and key[1] >= self.updated_after_ns
        return True


def page_response(
    query: ListQuery, page: list[pb.Task], more: bool, total: int
) -> pb.ListTasksResponse:
    """Build the response; `page` holds at most `page_size` tasks, `more` if others follow."""
    next_token = ""
    if more and page:
        has_ts, ts, task_id = sort_key(page[-1])
        next_token = encode_list_tasks_cursor(
            ListTasksCursor(timestamp_ns=ts if has_ts else None, task_id=task_id)
        )
    return pb.ListTasksResponse(
        tasks=page, next_page_token=next_token, page_size=query.page_size, total_size=total
    )


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
