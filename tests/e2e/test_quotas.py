"""Per-owner quotas through the whole edge: a principal over its share is refused with the
documented status and reason, and another principal is served as before."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.edge import Edge, message_params, running_edge, unique

pytestmark = [pytest.mark.envoy, pytest.mark.e2e]


@pytest.fixture(scope="module")
def small_quotas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Edge]:
    """`orrery-a2a up` keeping two tasks per principal."""
    root: Path = tmp_path_factory.mktemp("quotas")
    with running_edge(root, {"ORRERY_A2A_MAX_TASKS_PER_OWNER": "2"}) as started:
        yield started


async def task_of(edge: Edge, token: str, text: str) -> dict[str, Any]:
    response = await edge.rpc(token, "SendMessage", message_params(text))
    assert response.status_code == 200
    task: dict[str, Any] = response.json()["result"]["task"]
    return task


async def test_a_principal_whose_tasks_all_wait_is_refused_a_new_one(small_quotas: Edge) -> None:
    """Two tasks waiting for approvals fill the quota: the next new task gets 429
    `TASK_QUOTA_EXCEEDED` with `Retry-After` and runs nothing; another principal's turn runs."""
    edge = small_quotas
    flooder, other = edge.token(subject=unique("flood")), edge.token(subject=unique("other"))
    for service in ("checkout", "payments"):
        waiting = await task_of(edge, flooder, f"please restart {service}")
        assert waiting["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    refused = await edge.rpc(flooder, "SendMessage", message_params("how is checkout?"))
    assert refused.status_code == 429
    assert refused.headers["retry-after"] == "5"
    assert refused.json()["error"]["data"][0]["reason"] == "TASK_QUOTA_EXCEEDED"
    await edge.event("adapter", "a2a_request", outcome="task_quota_exceeded")
    answered = await task_of(edge, other, "how is checkout?")
    assert answered["status"]["state"] == "TASK_STATE_COMPLETED"
