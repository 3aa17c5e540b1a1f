"""Per-owner quotas: one owner's flood never pushes out another owner's waiting task or a pending
approval; the new task or approval is refused instead, with a stable reason code."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator

import httpx
import pytest
from a2a.types import a2a_pb2 as pb

from adapter.errors import (
    ApprovalQuotaExceeded,
    ApprovalStoreFull,
    TaskQuotaExceeded,
    TaskStoreFull,
)
from adapter.gateway import ConfirmationStore
from adapter.principal import owner_of
from adapter.stores.memory import (
    BoundedTaskStore,
    MemoryConfirmationStore,
    MemoryMessageClaims,
)
from adapter.stores.postgres import PostgresStores
from contract.identity import Principal
from tests.adapter.conftest import (
    PROPOSAL,
    Server,
    delegated,
    fresh_schema,
    message_params,
    running,
)
from tests.adapter.test_stores import ALICE, BOB, task

WAITING = pb.TASK_STATE_INPUT_REQUIRED
FINISHED = pb.TASK_STATE_COMPLETED


async def test_a_full_store_never_drops_another_owners_waiting_task() -> None:
    """Bob's input-required task outlives Alice's flood: room comes from finished tasks only,
    and once none is left Alice's next task is refused with `task_store_full`."""
    store = BoundedTaskStore(max_tasks=3, max_tasks_per_owner=3)
    bobs = task(1, state=WAITING)
    await store.save(bobs, BOB)
    for seconds in (2, 3):
        await store.admit(owner_of(ALICE))
        await store.save(task(seconds, state=FINISHED), ALICE)
    for seconds in (4, 5):
        await store.admit(owner_of(ALICE))
        await store.save(task(seconds, state=WAITING), ALICE)
    with pytest.raises(TaskStoreFull) as refused:
        await store.admit(owner_of(ALICE))
    assert (refused.value.status, refused.value.reason) == (503, "task_store_full")
    assert await store.get(bobs.id, BOB) == bobs
    assert await store.count() == 3


async def test_an_owner_at_its_quota_makes_room_from_its_own_finished_tasks() -> None:
    """Over its quota an owner's least recently used finished task goes — never another's."""
    store = BoundedTaskStore(max_tasks=100, max_tasks_per_owner=2)
    bobs = task(1, state=FINISHED)
    await store.save(bobs, BOB)
    old, waiting = task(2, state=FINISHED), task(3, state=WAITING)
    await store.save(old, ALICE)
    await store.save(waiting, ALICE)
    await store.admit(owner_of(ALICE))
    await store.save(task(4, state=WAITING), ALICE)
    assert await store.get(old.id, ALICE) is None
    assert await store.get(waiting.id, ALICE) is not None
    assert await store.get(bobs.id, BOB) is not None


async def test_an_owner_whose_tasks_are_all_unfinished_is_refused_a_new_one() -> None:
    """At its quota with nothing finished: 429 `task_quota_exceeded`; other owners are not."""
    store = BoundedTaskStore(max_tasks=100, max_tasks_per_owner=2)
    for seconds in (1, 2):
        await store.save(task(seconds, state=WAITING), ALICE)
    with pytest.raises(TaskQuotaExceeded) as refused:
        await store.admit(owner_of(ALICE))
    assert (refused.value.status, refused.value.reason, refused.value.limit) == (
        429,
        "task_quota_exceeded",
        2,
    )
    await store.admit(owner_of(BOB))


async def test_updating_a_kept_task_is_never_refused() -> None:
    """A running turn can always finish its task, however full the store is."""
    store = BoundedTaskStore(max_tasks=1, max_tasks_per_owner=1)
    waiting = task(1, state=WAITING)
    await store.save(waiting, ALICE)
    finished = task(2, state=FINISHED, task_id=waiting.id)
    await store.save(finished, ALICE)
    assert await store.get(waiting.id, ALICE) == finished


async def test_listing_follows_a_task_into_its_new_state() -> None:
    """A state change moves the task between the status filters' answers (and their totals)."""
    store = BoundedTaskStore()
    waiting = task(1, state=WAITING)
    await store.save(waiting, ALICE)
    await store.save(task(2, state=FINISHED, task_id=waiting.id), ALICE)
    by_waiting = await store.list(pb.ListTasksRequest(status=WAITING), ALICE)
    by_finished = await store.list(pb.ListTasksRequest(status=FINISHED), ALICE)
    assert (by_waiting.total_size, by_finished.total_size) == (0, 1)
    assert [t.id for t in by_finished.tasks] == [waiting.id]


async def test_one_owners_flood_of_messages_keeps_anothers_claim() -> None:
    """Claims over an owner's share push out that owner's oldest, never another owner's: Bob's
    retry still finds its first answer."""
    claims = MemoryMessageClaims(max_claims=10, max_claims_per_owner=3)
    await claims.claim("bob", "m0", task_id="t-bob", fingerprint="f")
    for n in range(20):
        await claims.claim("alice", f"m{n}", task_id=f"t{n}", fingerprint="f")
    kept = [n for n in range(20) if await claims.get("alice", f"m{n}") is not None]
    assert kept == [17, 18, 19]
    retried = await claims.claim("bob", "m0", task_id="t-other", fingerprint="f")
    assert (retried.task_id, retried.mine) == ("t-bob", False)


@pytest.fixture(params=["memory", "postgres"])
async def quota_of_two(request: pytest.FixtureRequest) -> AsyncIterator[ConfirmationStore]:
    """A confirmation store allowing each owner two live actions."""
    if request.param == "memory":
        yield MemoryConfirmationStore(max_pending_per_owner=2)
        return
    database_url = str(request.getfixturevalue("database_url"))
    async with fresh_schema(database_url) as schema:
        stores = await PostgresStores.open(database_url, schema, max_pending_per_owner=2)
        try:
            yield stores.confirmations
        finally:
            await stores.close()


async def test_an_owner_over_its_approval_quota_is_refused(
    quota_of_two: ConfirmationStore,
) -> None:
    """A third live action of the same owner is refused; another owner's is not."""
    await quota_of_two.propose(PROPOSAL)
    await quota_of_two.propose(PROPOSAL)
    with pytest.raises(ApprovalQuotaExceeded) as refused:
        await quota_of_two.propose(PROPOSAL)
    assert (refused.value.reason, refused.value.limit) == ("approval_quota_exceeded", 2)
    await quota_of_two.propose(dataclasses.replace(PROPOSAL, owner="k2"))


async def test_settled_actions_give_their_quota_back(quota_of_two: ConfirmationStore) -> None:
    """A denied or withdrawn action no longer counts; an approved one not yet run still does."""
    approved = await quota_of_two.propose(PROPOSAL)
    denied = await quota_of_two.propose(PROPOSAL)
    await quota_of_two.decide(approved.action_id, subject="alice", decision="approve")
    await quota_of_two.decide(denied.action_id, subject="alice", decision="deny")
    withdrawn = await quota_of_two.propose(PROPOSAL)
    with pytest.raises(ApprovalQuotaExceeded):
        await quota_of_two.propose(PROPOSAL)
    await quota_of_two.withdraw(withdrawn.action_id, owner="k1")
    await quota_of_two.propose(PROPOSAL)


async def test_the_approval_quota_holds_under_racing_proposals(database_url: str) -> None:
    """Ten proposals of one owner at once on shared stores: exactly the quota is recorded."""
    async with fresh_schema(database_url) as schema:
        stores = await PostgresStores.open(database_url, schema, max_pending_per_owner=2)
        try:
            outcomes = await asyncio.gather(
                *(stores.confirmations.propose(PROPOSAL) for _ in range(10)),
                return_exceptions=True,
            )
            assert await stores.confirmations.pending() == 2
        finally:
            await stores.close()
    refused = [o for o in outcomes if isinstance(o, ApprovalQuotaExceeded)]
    assert len(refused) == 8


async def test_a_full_approval_store_refuses_instead_of_dropping_a_pending_one() -> None:
    """Full of pending actions: the new proposal is refused (`approval_store_full`) and every
    pending one stays; once one is settled, it is what makes room."""
    store = MemoryConfirmationStore(max_entries=2)
    first = await store.propose(PROPOSAL)
    second = await store.propose(dataclasses.replace(PROPOSAL, owner="k2"))
    with pytest.raises(ApprovalStoreFull) as refused:
        await store.propose(dataclasses.replace(PROPOSAL, owner="k3"))
    assert refused.value.reason == "approval_store_full"
    for entry in (first, second):
        assert (await store.get(entry.action_id, subject="alice")) is not None
    await store.decide(second.action_id, subject="alice", decision="deny")
    await store.propose(dataclasses.replace(PROPOSAL, owner="k3"))
    assert await store.get(second.action_id, subject="alice") is None
    assert await store.get(first.action_id, subject="alice") is not None


async def test_an_expired_pending_action_makes_room() -> None:
    """An action past its TTL can no longer run: it is not protected."""
    now = [1000.0]
    store = MemoryConfirmationStore(clock=lambda: now[0], max_entries=1)
    stale = await store.propose(PROPOSAL)
    now[0] += PROPOSAL.ttl + 1
    await store.propose(PROPOSAL)
    assert await store.get(stale.action_id, subject="alice") is None


async def test_a_new_task_over_the_owners_quota_is_refused_before_its_turn() -> None:
    """Through the adapter, blocking or streaming: 429 `task_quota_exceeded` with `Retry-After`,
    nothing run; another principal still gets its turn."""
    async with running({"ORRERY_A2A_MAX_TASKS_PER_OWNER": "1"}) as server:
        flooder, other = delegated("flood-bot", "alice"), delegated("bot", "bob")
        waiting = await _send(server, flooder, "please restart checkout")
        assert waiting.json()["result"]["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        turns = len(server.gateway.turns)
        refused = await _send(server, flooder, "how is checkout?")
        streamed = await server.rpc(flooder, "SendStreamingMessage", message_params("hi"))
        for response in (refused, streamed):
            assert response.status_code == 429
            assert response.headers["Retry-After"] == "5"
            assert response.json()["error"]["data"][0]["reason"] == "TASK_QUOTA_EXCEEDED"
        assert len(server.gateway.turns) == turns
        assert (await _send(server, other, "how is checkout?")).status_code == 200


async def test_a_retry_is_answered_whatever_the_quota() -> None:
    """A resent first message (same `messageId`) gets its task, not a quota refusal; the refused
    message's id stays free, so it runs once there is room."""
    async with running({"ORRERY_A2A_MAX_TASKS_PER_OWNER": "1"}) as server:
        agent = delegated("deploy-bot", "alice")
        first = message_params("please restart checkout")
        sent = await server.rpc(agent, "SendMessage", first)
        resent = await server.rpc(agent, "SendMessage", first)
        assert resent.json()["result"]["task"]["id"] == sent.json()["result"]["task"]["id"]
        refused_message = message_params("how is checkout?")
        refused = await server.rpc(agent, "SendMessage", refused_message)
        assert refused.status_code == 429
        waiting = sent.json()["result"]["task"]["id"]
        cancelled = await server.rpc(agent, "CancelTask", {"id": waiting})
        assert cancelled.json()["result"]["status"]["state"] == "TASK_STATE_CANCELED"
        ran = await server.rpc(agent, "SendMessage", refused_message)
        assert ran.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_a_proposal_over_the_approval_quota_rejects_its_task() -> None:
    """Through the adapter: the turn's task ends REJECTED with reason `approval_quota_exceeded`
    in its status message's metadata; the pending approval before it is untouched."""
    env = {"ORRERY_A2A_MAX_PENDING_APPROVALS_PER_OWNER": "1"}
    async with running(env) as server:
        agent = delegated("deploy-bot", "alice")
        first = (await _send(server, agent, "please restart checkout")).json()["result"]["task"]
        second = (await _send(server, agent, "please restart payments")).json()["result"]["task"]
        assert second["status"]["state"] == "TASK_STATE_REJECTED"
        assert second["status"]["message"]["metadata"] == {
            "reason": "approval_quota_exceeded",
            "limit": 1,
        }
        action_id = first["status"]["message"]["parts"][1]["data"]["action_id"]
        shown = await server.gateway.confirmations.get(action_id, subject="alice")
        assert shown is not None and shown.status == "pending"


async def _send(server: Server, principal: Principal, text: str) -> httpx.Response:
    return await server.rpc(principal, "SendMessage", message_params(text))
