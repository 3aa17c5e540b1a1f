"""A gateway the end-to-end tests can hold open from outside the adapter process.

It is the demo gateway, except that a message `hold <name>` waits until the file `<name>` exists
in the directory `ORRERY_E2E_RELEASE_DIR`, then answers what the demo gateway answers for "how is
checkout?", and a message `fail` makes the gateway raise (with internals in the exception's
text, which must never reach the caller). The adapter loads it with
`ORRERY_A2A_GATEWAY=tests.e2e.held_gateway:create`, so a test keeps a turn running (to subscribe
to it, cancel it, or keep its stream silent) and ends it by creating the file. A fake at a seam
we own (`AgentGateway`), never in front of Envoy or authz.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from pathlib import Path

from adapter.gateway import GatewayContext, Pending, Reply, Turn
from gateways.demo import DemoGateway

RELEASE_DIR = "ORRERY_E2E_RELEASE_DIR"
HOLD = "hold "
FAIL = "fail"
SECRET = "db password hunter2 at 10.0.0.7"  # what a failing gateway's exception may carry
_POLL_SECONDS = 0.05


class HeldGateway(DemoGateway):
    def __init__(self, context: GatewayContext, release_dir: Path) -> None:
        super().__init__(context.confirmations, context.approval_ttl)
        self._release_dir = release_dir

    async def run_in_session(self, turn: Turn) -> Reply | Pending:
        if turn.text == FAIL:
            raise RuntimeError(SECRET)
        if turn.text.startswith(HOLD):
            released = self._release_dir / turn.text.removeprefix(HOLD).strip()
            while not await asyncio.to_thread(released.exists):
                await asyncio.sleep(_POLL_SECONDS)
            turn = dataclasses.replace(turn, text="how is checkout?")
        return await super().run_in_session(turn)


def create(context: GatewayContext) -> HeldGateway:
    """The `ORRERY_A2A_GATEWAY` factory; the release directory comes from the environment."""
    return HeldGateway(context, Path(os.environ[RELEASE_DIR]))
