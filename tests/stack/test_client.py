"""`ask` and `approve` on their own: reply rendering, refusals and unreachable edges."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping

import pytest
from a2a.types import a2a_pb2 as pb
from aiohttp import web
from google.protobuf import struct_pb2

from stack.client import ClientFailure, approve, ask, render
from tests.stack.conftest import serving


def _task(
    state: pb.TaskState, *, parts: list[pb.Part] | None = None, artifact: str | None = None
) -> pb.StreamResponse:
    task = pb.Task(
        id="task-1",
        context_id="ctx-1",
        status=pb.TaskStatus(state=state, message=pb.Message(parts=parts or [])),
    )
    if artifact is not None:
        task.artifacts.append(pb.Artifact(artifact_id="a", parts=[pb.Part(text=artifact)]))
    return pb.StreamResponse(task=task)


def _data(value: Mapping[str, object]) -> pb.Part:
    data = struct_pb2.Value()
    data.struct_value.update(value)
    return pb.Part(data=data)


def test_a_completed_task_prints_its_reply_and_how_to_continue() -> None:
    """Artifact text on stdout; the context id to continue with on stderr."""
    reply = render(_task(pb.TASK_STATE_COMPLETED, artifact="all services healthy"))
    assert reply.answer == ["all services healthy"]
    assert "  orrery-a2a ask --context-id ctx-1 '…'" in reply.hints
    assert reply.exit_code == 0


def test_an_input_required_task_prints_the_approval_and_the_commands() -> None:
    """The action, tool, args, expiry, and ready-to-paste approve/deny/resume commands."""
    details = {
        "action_id": "act-9",
        "tool": "restart_service",
        "args": {"service": "checkout"},
        "level": "L3",
        "expires_at": "2030-01-01T00:00:00Z",
        "approve_url": "http://127.0.0.1:8080/approvals/act-9",
    }
    reply = render(
        _task(pb.TASK_STATE_INPUT_REQUIRED, parts=[pb.Part(text="restart?"), _data(details)]),
        " --state-dir /s",
    )
    assert reply.answer == [
        "Approval needed: restart?",
        "  action:  act-9",
        "  tool:    restart_service (level L3)",
        '  args:    {"service": "checkout"}',
        "  expires: 2030-01-01T00:00:00Z",
    ]
    assert reply.hints == [
        "A human decides (a reply on the task is not an approval):",
        "  orrery-a2a approve --state-dir /s act-9",
        "  orrery-a2a approve --state-dir /s --deny act-9",
        "Then resume the task:",
        "  orrery-a2a ask --state-dir /s --task-id task-1 --context-id ctx-1 'go ahead'",
    ]


def test_an_action_id_starting_with_a_dash_is_passed_after_double_dash() -> None:
    """A base64url id like `-hH6x…` would parse as an option; the printed commands use `--`."""
    details = {"action_id": "-hH6xtSLY", "tool": "restart_service", "level": "L3"}
    reply = render(_task(pb.TASK_STATE_INPUT_REQUIRED, parts=[_data(details)]))
    assert "  orrery-a2a approve -- -hH6xtSLY" in reply.hints
    assert "  orrery-a2a approve --deny -- -hH6xtSLY" in reply.hints


@pytest.mark.parametrize(
    ("state", "words"),
    [
        (pb.TASK_STATE_FAILED, "failed"),
        (pb.TASK_STATE_REJECTED, "was rejected"),
        (pb.TASK_STATE_CANCELED, "was canceled"),
    ],
)
def test_a_failed_task_is_an_error_with_its_reason(state: pb.TaskState, words: str) -> None:
    """Terminal failures exit 1 and say why on stderr."""
    reply = render(_task(state, parts=[pb.Part(text="guarded action refused")]))
    assert reply.exit_code == 1
    assert reply.answer == []
    assert reply.hints == [f"task task-1 {words}: guarded action refused"]


def test_a_direct_message_prints_its_text() -> None:
    """A message reply (no task) prints its text parts."""
    response = pb.StreamResponse(message=pb.Message(parts=[pb.Part(text="hello")]))
    assert render(response).answer == ["hello"]


STATUS = {"approve": "approved", "deny": "denied"}


@pytest.fixture
async def approvals_server() -> AsyncIterator[str]:
    """An approvals endpoint: act-ok succeeds, anything else is refused like the adapter does."""

    async def decide(request: web.Request) -> web.Response:
        body = await request.json()
        assert request.headers["Authorization"] == "Bearer human-token"
        if request.match_info["action_id"] == "act-done":
            return web.json_response(
                {"action_id": "act-done", "status": "already_decided", "message": "decided before"},
                status=409,
            )
        if request.match_info["action_id"] != "act-ok":
            return web.json_response(
                {"error": "forbidden", "error_description": "not your approval"}, status=403
            )
        return web.json_response(
            {"action_id": "act-ok", "status": STATUS[body["decision"]], "message": "done"}
        )

    app = web.Application()
    app.router.add_post("/approvals/{action_id}", decide)
    async with serving(app) as url:
        yield url


async def test_approve_posts_the_decision_and_prints_the_answer(approvals_server: str) -> None:
    """The JSON answer's status and message are printed."""
    assert await approve(approvals_server, "human-token", "act-ok") == "act-ok: approved — done"
    assert await approve(approvals_server, "human-token", "act-ok", deny=True) == (
        "act-ok: denied — done"
    )


async def test_an_answer_that_starts_with_its_status_says_it_once() -> None:
    """The edge's message "approved; the agent continues …" is printed once, not after
    "approved — "."""

    async def decide(request: web.Request) -> web.Response:
        return web.json_response(
            {"action_id": "act-1", "status": "approved", "message": "approved; it runs once"}
        )

    app = web.Application()
    app.router.add_post("/approvals/{action_id}", decide)
    async with serving(app) as url:
        assert await approve(url, "human-token", "act-1") == "act-1: approved; it runs once"


async def test_a_refused_approval_is_a_failure_with_the_reason(approvals_server: str) -> None:
    """A 403 body's error and description are shown, nothing else."""
    with pytest.raises(ClientFailure, match=r"^approve act-x: 403 forbidden: not your approval$"):
        await approve(approvals_server, "human-token", "act-x")


async def test_an_approvals_answer_that_is_not_200_shows_its_message(
    approvals_server: str,
) -> None:
    """A 409 from the approvals endpoint says why (its status and message), not just 409."""
    with pytest.raises(
        ClientFailure, match=r"^approve act-done: 409 already_decided: decided before$"
    ):
        await approve(approvals_server, "human-token", "act-done")


async def test_an_unreachable_edge_is_a_clear_failure(unused_tcp_port: int) -> None:
    """Nothing listening: `ask` and `approve` say they cannot reach the URL."""
    url = f"http://127.0.0.1:{unused_tcp_port}"
    with pytest.raises(ClientFailure, match="cannot reach"):
        await ask(url, "t", "hello")
    with pytest.raises(ClientFailure, match="cannot reach"):
        await approve(url, "t", "act-1")
