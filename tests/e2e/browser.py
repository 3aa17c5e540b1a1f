"""A real headless browser for the CORS tests: Debian's `chromium`, over the DevTools protocol.

No browser is downloaded: `scripts/install-chromium` installs the distribution's package (`.ci/run`
calls it), and without it the tests skip with that hint — or fail under
`ORRERY_TEST_REQUIRE_SERVICES=1`. Chromium starts headless with a fresh profile and its DevTools
endpoint on a free port (`--remote-debugging-port=0`, read back from `DevToolsActivePort`); the
tests talk to it with aiohttp's WebSocket client: navigate the one page to a URL, wait for its
`load` event, evaluate a script there (awaiting its promise) and return the JSON value.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.conftest import services_required

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-port=0",
)
START_TIMEOUT = 60.0
CALL_TIMEOUT = 60.0


def chromium_binary() -> str:
    """The chromium on PATH, else skip (fail when services are required)."""
    binary = shutil.which("chromium")
    if binary is None:
        message = "no chromium on PATH (scripts/install-chromium installs Debian's package)"
        if services_required():
            pytest.fail(f"{message}; ORRERY_TEST_REQUIRE_SERVICES=1 makes browser tests mandatory")
        pytest.skip(message)
    return binary


class Page:
    """The browser's one page, over its DevTools WebSocket."""

    def __init__(self, socket: aiohttp.ClientWebSocketResponse) -> None:
        self._socket = socket
        self._ids = itertools.count(1)
        self._events: list[dict[str, Any]] = []

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        """One DevTools command and its result (events seen meanwhile are kept)."""
        call_id = next(self._ids)
        await self._socket.send_json({"id": call_id, "method": method, "params": params})
        async with asyncio.timeout(CALL_TIMEOUT):
            while True:
                message = await self._socket.receive_json()
                if message.get("id") == call_id:
                    if "error" in message:
                        raise AssertionError(f"{method}: {message['error']}")
                    return dict(message.get("result", {}))
                self._events.append(message)

    async def _event(self, name: str) -> dict[str, Any]:
        async with asyncio.timeout(CALL_TIMEOUT):
            while True:
                for index, event in enumerate(self._events):
                    if event.get("method") == name:
                        return self._events.pop(index)
                self._events.append(await self._socket.receive_json())

    async def goto(self, url: str) -> None:
        """Navigate and wait for the page's load event."""
        self._events.clear()
        await self.call("Page.navigate", url=url)
        await self._event("Page.loadEventFired")

    async def run(self, script: str) -> Any:
        """Evaluate `script` (an expression, possibly a promise) in the page; its JSON value."""
        result = await self.call(
            "Runtime.evaluate", expression=script, awaitPromise=True, returnByValue=True
        )
        if "exceptionDetails" in result:
            raise AssertionError(f"the page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")


async def _devtools_port(profile: Path, process: subprocess.Popen[bytes]) -> int:
    active = profile / "DevToolsActivePort"
    async with asyncio.timeout(START_TIMEOUT):
        while not active.exists() or not active.read_text().strip():
            if process.poll() is not None:
                raise AssertionError(f"chromium exited with {process.returncode}")
            await asyncio.sleep(0.1)
    return int(active.read_text().splitlines()[0])


@contextlib.asynccontextmanager
async def headless_chromium() -> AsyncIterator[Page]:
    """Chromium with a fresh profile, removed afterwards; yields its page."""
    binary = chromium_binary()
    with tempfile.TemporaryDirectory(prefix="chromium-") as profile:
        process = subprocess.Popen(
            [binary, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # its helpers (zygote, renderers, crashpad) in one group
        )
        try:
            port = await _devtools_port(Path(profile), process)
            async with aiohttp.ClientSession() as session:
                async with session.get(f"http://127.0.0.1:{port}/json/list") as response:
                    targets = await response.json(content_type=None)
                (page,) = [target for target in targets if target["type"] == "page"]
                async with session.ws_connect(
                    page["webSocketDebuggerUrl"], max_msg_size=0
                ) as socket:
                    driver = Page(socket)
                    await driver.call("Page.enable")
                    yield driver
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            await _end_group(process.pid)


async def _end_group(group: int) -> None:
    """Kill what is left of chromium's process group and wait until none of it runs: a helper
    that outlives the browser still writes into the profile, whose removal then fails
    ("Directory not empty")."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signal.SIGKILL)
    async with asyncio.timeout(START_TIMEOUT):
        while _running_in(group):
            await asyncio.sleep(0.05)


def _running_in(group: int) -> bool:
    """Whether a process of `group` still runs (a zombie, waiting for its reaper, does not)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            # after the parenthesised command: state, ppid, pgrp
            state, _, pgrp = stat.read_text().rsplit(")", 1)[1].split()[:3]
            if int(pgrp) == group and state != "Z":
                return True
    return False
