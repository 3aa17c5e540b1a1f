"""`orrery-a2a ask` and `approve`: talk to the stack through Envoy, as a real client would.

`ask` uses the a2a-sdk client (`ClientFactory.create_from_url`): it fetches the public agent card
anonymously and sends the bearer token only with the JSON-RPC call (per-call service parameters),
so the token never goes to an endpoint that does not need it. The reply is printed on stdout; what
to type next (continue the conversation, approve a pending action) goes to stderr, so scripts can
capture the answer alone.

`approve` is the human's side of the approval flow: `POST /approvals/{action_id}` with a token for
the console audience. A reply on the task is not a decision; only this is.
"""

from __future__ import annotations

import json
import shlex
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import httpx
from a2a.client import ClientCallContext, ClientConfig, ClientFactory
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import A2AError
from google.protobuf.json_format import MessageToDict

from stack.state import StackError

_FAILED_STATES = {
    pb.TASK_STATE_FAILED: "failed",
    pb.TASK_STATE_REJECTED: "was rejected",
    pb.TASK_STATE_CANCELED: "was canceled",
    pb.TASK_STATE_AUTH_REQUIRED: "needs another authorization",
}


class ClientFailure(StackError):
    """A request that did not get an answer; the message is for the user."""


@dataclass(frozen=True, slots=True)
class Reply:
    """What to print: `answer` on stdout, `hints` on stderr, and the exit code."""

    answer: list[str]
    hints: list[str] = field(default_factory=list)
    exit_code: int = 0


def describe_http_error(response: httpx.Response) -> str:
    """What a refusal says, from its JSON body, else the status line.

    Two bodies exist: a denial by authz or the adapter's 401 (`{"error", "error_description"}`,
    e.g. `401 token_expired: token has expired`) and an answer of the approvals endpoint
    (`{"action_id", "status", "message"}`, e.g. `409 already_decided: …`).
    """
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        for code, text in (("error", "error_description"), ("status", "message")):
            if isinstance(body.get(code), str):
                detail = f" {body[code]}"
                if isinstance(body.get(text), str):
                    detail += f": {body[text]}"
                return f"{response.status_code}{detail}"
    detail = f" {response.reason_phrase}" if response.reason_phrase else ""
    return f"{response.status_code}{detail}"


def _unreachable(url: str, exc: httpx.TransportError) -> ClientFailure:
    return ClientFailure(f"cannot reach {url} ({type(exc).__name__}); is the stack up?")


def _a2a_failure(url: str, exc: A2AError) -> ClientFailure:
    cause = exc.__cause__
    if isinstance(cause, httpx.HTTPStatusError):
        return ClientFailure(f"{url} answered {describe_http_error(cause.response)}")
    if isinstance(cause, httpx.TransportError):
        return _unreachable(url, cause)
    return ClientFailure(f"{url}: {exc}")


def _texts(parts: Iterable[pb.Part]) -> list[str]:
    return [part.text for part in parts if part.WhichOneof("content") == "text"]


def _data(parts: Iterable[pb.Part]) -> dict[str, Any]:
    for part in parts:
        if part.WhichOneof("content") == "data":
            value = MessageToDict(part.data)
            if isinstance(value, dict):
                return value
    return {}


def approval_lines(
    details: dict[str, Any], task: pb.Task, options: str
) -> tuple[list[str], list[str]]:
    """The approval block (stdout) and the commands to decide and resume (stderr)."""
    action = str(details.get("action_id", "?"))
    # Action ids are base64url and may start with "-": after `--` it is never read as an option.
    action_arg = f"-- {shlex.quote(action)}" if action.startswith("-") else shlex.quote(action)
    answer = [
        f"  action:  {action}",
        f"  tool:    {details.get('tool', '?')} (level {details.get('level', '?')})",
        f"  args:    {json.dumps(details.get('args', {}), sort_keys=True)}",
        f"  expires: {details.get('expires_at', '?')}",
    ]
    hints = [
        "A human decides (a reply on the task is not an approval):",
        f"  orrery-a2a approve{options} {action_arg}",
        f"  orrery-a2a approve{options} --deny {action_arg}",
        "Then resume the task:",
        f"  orrery-a2a ask{options} --task-id {shlex.quote(task.id)} "
        f"--context-id {shlex.quote(task.context_id)} 'go ahead'",
    ]
    return answer, hints


def render(response: pb.StreamResponse, options: str = "") -> Reply:
    """Turn the final `StreamResponse` of a blocking SendMessage into what the user sees.

    `options` (e.g. ` --state-dir DIR`) is repeated in every command suggested to the user.
    """
    if response.HasField("message"):
        return Reply(_texts(response.message.parts))
    task = response.task
    status_texts = _texts(task.status.message.parts)
    follow_up = [
        "Continue this conversation:",
        f"  orrery-a2a ask{options} --context-id {shlex.quote(task.context_id)} '…'",
    ]
    if task.status.state == pb.TASK_STATE_INPUT_REQUIRED:
        answer, hints = approval_lines(_data(task.status.message.parts), task, options)
        return Reply(["Approval needed: " + " ".join(status_texts), *answer], hints)
    if task.status.state in _FAILED_STATES:
        reason = " ".join(status_texts) or "no reason given"
        headline = f"task {task.id} {_FAILED_STATES[task.status.state]}: {reason}"
        return Reply([], [headline], exit_code=1)
    artifact_texts = [text for artifact in task.artifacts for text in _texts(artifact.parts)]
    if task.status.state == pb.TASK_STATE_COMPLETED:
        return Reply(artifact_texts or status_texts, follow_up)
    state = pb.TaskState.Name(task.status.state)
    return Reply(artifact_texts or status_texts, [f"task {task.id} is {state}", *follow_up])


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def ask(
    url: str,
    token: str,
    text: str,
    *,
    context_id: str | None = None,
    task_id: str | None = None,
    timeout_seconds: float = 120.0,
) -> pb.StreamResponse:
    """Send one message (blocking SendMessage) and return the final response."""
    message = pb.Message(
        role=pb.ROLE_USER, message_id=str(uuid.uuid4()), parts=[pb.Part(text=text)]
    )
    if context_id:
        message.context_id = context_id
    if task_id:
        message.task_id = task_id
    context = ClientCallContext(service_parameters=bearer(token))
    last: pb.StreamResponse | None = None
    async with httpx.AsyncClient(timeout=timeout_seconds) as http:
        try:
            client = await ClientFactory(
                ClientConfig(httpx_client=http, streaming=False)
            ).create_from_url(url)
            async for event in client.send_message(
                pb.SendMessageRequest(message=message), context=context
            ):
                last = event
        except A2AError as exc:
            raise _a2a_failure(url, exc) from None
    if last is None:
        raise ClientFailure(f"{url} sent no reply")
    return last


async def approve(url: str, token: str, action_id: str, *, deny: bool = False) -> str:
    """Decide a pending action as the human; return the server's message."""
    decision = "deny" if deny else "approve"
    target = f"{url}/approvals/{action_id}"
    async with httpx.AsyncClient(timeout=30.0) as http:
        try:
            response = await http.post(target, json={"decision": decision}, headers=bearer(token))
        except httpx.TransportError as exc:
            raise _unreachable(url, exc) from None
    if response.status_code >= 400:
        raise ClientFailure(f"{decision} {action_id}: {describe_http_error(response)}")
    try:
        body = response.json()
    except ValueError:
        body = {}
    if not isinstance(body, dict):
        body = {}
    status = str(body.get("status", decision))
    message = str(body.get("message", ""))
    if not message:
        return f"{action_id}: {status}"
    # The edge's own messages start with the outcome ("approved; the agent continues …"): say it
    # once, not "approved — approved; …".
    if message.startswith(status):
        return f"{action_id}: {message}"
    return f"{action_id}: {status} — {message}"
