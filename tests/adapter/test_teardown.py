"""The adapter's stop is bounded even when the a2a-sdk's teardown of its active tasks is not.

`ActiveTask.aclose` has been seen to hang when another writer ended its task mid-turn; a stop
that waits on it forever leaves the process to its supervisor's kill and its stores unclosed.
"""

from __future__ import annotations

import asyncio
import logging

import pytest

from adapter import app as adapter_app
from adapter.handler import RequestHandler
from tests.adapter import fakes
from tests.adapter.conftest import running


async def test_a_handler_that_never_finishes_closing_does_not_hold_up_the_stop(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The stop goes on after `HANDLER_CLOSE_SECONDS`, with one warning that says so."""

    async def never_closes(_: RequestHandler) -> None:
        await asyncio.Event().wait()

    monkeypatch.setattr(adapter_app, "HANDLER_CLOSE_SECONDS", 0.1)
    monkeypatch.setattr(RequestHandler, "aclose", never_closes)
    caplog.set_level(logging.WARNING, logger="adapter")
    async with running():
        pass
    events = [record.getMessage() for record in caplog.records if record.name == "adapter"]
    assert events == ["handler_close_timeout"]


async def test_the_gateway_is_closed_once_when_the_adapter_stops() -> None:
    """A gateway's optional `aclose` runs once at the stop (its connections close)."""
    fakes.ClosingGateway.closed = 0
    async with running({"ORRERY_A2A_GATEWAY": "tests.adapter.fakes:create_closing"}):
        assert fakes.ClosingGateway.closed == 0
    assert fakes.ClosingGateway.closed == 1
