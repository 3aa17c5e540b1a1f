"""The `ListTasks` rules both task stores share: order, filters, page tokens, page size.

A page token carries only the (timestamp, id) position of the caller's own last task; stores
filter by owner before they position or count, so another owner's token positions nothing of
theirs.
"""

from __future__ import annotations

from dataclasses import dataclass

from a2a.types import a2a_pb2 as pb
from a2a.utils.constants import DEFAULT_LIST_TASKS_PAGE_SIZE
from a2a.utils.errors import InvalidParamsError
from a2a.utils.task import ListTasksCursor, decode_list_tasks_cursor, encode_list_tasks_cursor

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
