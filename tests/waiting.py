"""Waiting for a condition instead of for a time: a test polls what it is about and goes on the
moment it holds, so it is quick on a quiet machine and still passes on a busy one."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

TIMEOUT = 20.0  # generous: the machine is shared; a condition that holds ends the wait at once


async def eventually(condition: Callable[[], Awaitable[bool]], timeout: float = TIMEOUT) -> None:
    """Poll `condition` until it holds; fail the test if it has not within `timeout` s."""
    deadline = time.monotonic() + timeout
    while not await condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.02)


def eventually_sync(condition: Callable[[], bool], timeout: float = TIMEOUT) -> None:
    """`eventually` for a test without an event loop: poll `condition` from this thread."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.02)
