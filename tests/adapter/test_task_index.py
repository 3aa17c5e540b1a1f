"""The memory store's listing index gives exactly the page and total a full sort and filter give."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from adapter.stores.listing import ListQuery, SortKey
from adapter.stores.task_index import TaskIndex

CONTEXTS = ["", "c1", "c2"]
STATES = [0, 2, 3, 6]  # unspecified as a filter; working, completed, input-required as states

Row = tuple[str, int, SortKey]  # (context, state, sort key)

keys = st.tuples(st.booleans(), st.integers(0, 5), st.text("aAb_", min_size=1, max_size=3))
rows = st.lists(
    st.tuples(st.sampled_from(CONTEXTS[1:]), st.sampled_from(STATES[1:]), keys),
    unique_by=lambda row: row[2][2],  # task ids are unique per owner
    max_size=30,
)
queries = st.builds(
    ListQuery,
    context_id=st.sampled_from(CONTEXTS),
    state=st.sampled_from(STATES),
    updated_after_ns=st.none() | st.integers(0, 6),
    after=st.none() | keys,
    page_size=st.integers(1, 10),
)


def by_sorting(owned: list[Row], query: ListQuery) -> tuple[list[SortKey], int]:
    """What the store did before the index: filter, sort newest first, position, cut."""
    matching = sorted(
        (
            key
            for context, state, key in owned
            if (not query.context_id or context == query.context_id)
            and (not query.state or state == query.state)
            and (query.updated_after_ns is None or (key[0] and key[1] >= query.updated_after_ns))
        ),
        reverse=True,
    )
    after = query.after
    start = matching if after is None else [key for key in matching if key < after]
    return start[: query.page_size + 1], len(matching)


@given(mine=rows, theirs=rows, removed=st.integers(0, 30), query=queries)
def test_the_index_answers_like_a_full_sort(
    mine: list[Row], theirs: list[Row], removed: int, query: ListQuery
) -> None:
    """Any tasks (some removed again), another owner's beside them, any filters, any position."""
    index = TaskIndex()
    for owner, owned in (("alice", mine), ("bob", theirs)):
        for context, state, key in owned:
            index.add(owner, context, state, key)
    kept = mine[removed:]
    for context, state, key in mine[:removed]:
        index.remove("alice", context, state, key)
    assert index.select("alice", query) == by_sorting(kept, query)
