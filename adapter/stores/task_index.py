"""Ordered per-owner indexes for the memory task store: a `ListTasks` page without a scan.

Sorting an owner's tasks on every `ListTasks` made its cost grow with the owner's task count (an
owner with 26k tasks: ~90 ms a call, issue 12). Here every task's sort key (`listing.sort_key`)
sits, in order, in one sorted list per *partition* a filter can name: the owner, the owner and a
state, the owner and a context, the owner, context and state. Any combination of the `contextId`
and `status` filters is one partition; `statusTimestampAfter` and the page token are each a
bisection in it (the order is by timestamp first). So a page is O(log n + page size) and its
exact `totalSize` O(log n) — the same answers the old sort gave, by the same `listing` rules.
A write costs four sorted-list updates (bisect + memmove).
"""

from __future__ import annotations

import bisect
from collections.abc import Hashable

from adapter.stores.listing import ListQuery, SortKey

_Partition = tuple[Hashable, ...]


class TaskIndex:
    """Sort keys by partition, ascending (listing reads them from the end: newest first)."""

    def __init__(self) -> None:
        self._partitions: dict[_Partition, list[SortKey]] = {}

    @staticmethod
    def _of(owner: str, context_id: str, state: int) -> tuple[_Partition, ...]:
        return (
            (owner,),
            (owner, "state", state),
            (owner, "context", context_id),
            (owner, "context+state", context_id, state),
        )

    def add(self, owner: str, context_id: str, state: int, key: SortKey) -> None:
        for partition in self._of(owner, context_id, state):
            bisect.insort(self._partitions.setdefault(partition, []), key)

    def remove(self, owner: str, context_id: str, state: int, key: SortKey) -> None:
        for partition in self._of(owner, context_id, state):
            keys = self._partitions[partition]
            del keys[bisect.bisect_left(keys, key)]
            if not keys:
                del self._partitions[partition]

    def select(self, owner: str, query: ListQuery) -> tuple[list[SortKey], int]:
        """Up to `page_size + 1` keys of the page, newest first, and the total before paging."""
        if query.context_id and query.state:
            partition: _Partition = (owner, "context+state", query.context_id, query.state)
        elif query.context_id:
            partition = (owner, "context", query.context_id)
        elif query.state:
            partition = (owner, "state", query.state)
        else:
            partition = (owner,)
        keys = self._partitions.get(partition, [])
        low = 0
        if query.updated_after_ns is not None:
            low = bisect.bisect_left(keys, (True, query.updated_after_ns, ""))
        high = len(keys) if query.after is None else bisect.bisect_left(keys, query.after)
        high = max(high, low)
        start = max(low, high - query.page_size - 1)
        return keys[start:high][::-1], len(keys) - low
