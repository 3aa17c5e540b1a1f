"""How a turn that cannot finish ends its task: `TASK_STATE_FAILED`, with a reason.

A task is never left `TASK_STATE_SUBMITTED` (or `WORKING`) once no turn runs it any more: a client
polling it would wait for ever, and a subscriber would never hear its end. Whatever cut the turn
short, the task ends FAILED with an agent status message — a fixed text (never an exception's
message) and `metadata.reason`, a stable code, the same in the `turn_ended` log event and the
`orrery_a2a_turns_ended_total{reason}` metric:

* `gateway_failed` — the gateway raised (the executor);
* `turn_deadline` — the turn ran past `ORRERY_A2A_TURN_DEADLINE` (the executor);
* `adapter_stopped` — the adapter stopped while the turn ran: it is ended when the shutdown grace
  is over, before the streams end and the process exits (the executor, told by `turns.Turns.stop`);
* `turn_lost` — found by the recovery sweep (`recovery.py`): the task's status has not changed for
  longer than any live turn can take, so the replica that ran it died, or the store failed while
  the turn wrote its end.
"""

from __future__ import annotations

import uuid
from typing import Final, Literal

from a2a.types import a2a_pb2 as pb
from google.protobuf import timestamp_pb2

Reason = Literal["gateway_failed", "turn_deadline", "adapter_stopped", "turn_lost"]
REASONS: Final[tuple[Reason, ...]] = (
    "gateway_failed",
    "turn_deadline",
    "adapter_stopped",
    "turn_lost",
)

_START = "The agent could not finish this turn"
_END = (
    "this task has failed; nothing more will happen on it. Send the message again as a new task "
    "to retry."
)
TEXTS: Final[dict[Reason, str]] = {
    "gateway_failed": f"{_START}, and {_END}",
    "turn_deadline": f"{_START} in the time allowed, and {_END}",
    "adapter_stopped": f"{_START} before the server stopped, and {_END}",
    "turn_lost": f"{_START}: the server running it was lost, and {_END}",
}


def stamped(state: int, message: pb.Message | None = None) -> pb.TaskStatus:
    """A task status stamped now."""
    stamp = timestamp_pb2.Timestamp()
    stamp.GetCurrentTime()
    # Ignored below: the stubs want the TaskState enum; protobuf takes its int value as is.
    result = pb.TaskStatus(state=state, timestamp=stamp)  # type: ignore[arg-type]
    if message is not None:
        result.message.CopyFrom(message)
    return result


def agent_message(task_id: str, context_id: str, parts: list[pb.Part]) -> pb.Message:
    """A message of the agent's on the task (a status message)."""
    return pb.Message(
        message_id=uuid.uuid4().hex,
        role=pb.ROLE_AGENT,
        task_id=task_id,
        context_id=context_id,
        parts=parts,
    )


def failed_status(task_id: str, context_id: str, reason: Reason) -> pb.TaskStatus:
    """FAILED now, with the reason's fixed text and `metadata.reason`."""
    message = agent_message(task_id, context_id, [pb.Part(text=TEXTS[reason])])
    message.metadata.update({"reason": reason})
    return stamped(pb.TASK_STATE_FAILED, message)


def failed_event(task_id: str, context_id: str, reason: Reason) -> pb.TaskStatusUpdateEvent:
    """The status update that ends a task FAILED for `reason`."""
    return pb.TaskStatusUpdateEvent(
        task_id=task_id, context_id=context_id, status=failed_status(task_id, context_id, reason)
    )
