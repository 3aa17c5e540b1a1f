"""What a resumed turn tells the caller when the gate did not run its action: shared by every
gateway here, so the demo and the ADK gateway word each outcome the same way.

`consume` answers `pending` when nobody has decided yet, but a decision can land between that
answer and the reply: the entry is read once more, and a decision made meanwhile is reported as
what it is rather than as still waiting.
"""

from __future__ import annotations

from adapter.gateway import ConfirmationStore, GateOutcome, Pending, Reply

WAITING = "Still waiting for the person who delegated to you to decide."

_NOT_RUN = {
    "denied": "was denied",
    "expired": "expired before it was approved",
    "consumed": "was already carried out",
    "withdrawn": "was withdrawn when its task was cancelled",
    "mismatch": "is not the action that was approved",
    "not_found": "is unknown",
}


async def settled(
    store: ConfirmationStore, action_id: str, outcome: GateOutcome, subject: str
) -> Pending | str:
    """`outcome`, or for `pending` the action still waiting (a `Pending` to answer with) or the
    status it was given meanwhile (`not_found` when it is gone)."""
    if outcome != "pending":
        return outcome
    entry = await store.get(action_id, subject=subject)
    if entry is not None and entry.status == "pending":
        return Pending(confirmation=entry, summary=WAITING)
    return entry.status if entry is not None else "not_found"


def not_run(action_id: str, outcome: str) -> Reply:
    """The final reply for an action that did not run, and why."""
    return Reply(
        f"Action {action_id} {_NOT_RUN.get(outcome, 'cannot run')}; nothing was done.", True
    )
