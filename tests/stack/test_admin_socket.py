"""Envoy's admin API in the local stack: a 0600 Unix socket in the private state directory, so
only the user who ran `up` can drain, fail or quit the edge; no TCP port of the stack serves it."""

from __future__ import annotations

import os
import stat

import httpx
import pytest

from stack.state import ENVOY_ADMIN_SOCKET, StackState
from tests.admin_socket import admin_client
from tests.processes import descendants, listening_tcp_ports
from tests.stack.conftest import LocalStackRun

pytestmark = pytest.mark.envoy

# What the admin API does on a POST, and one thing only it answers on a GET.
ADMIN_POSTS = ("/quitquitquit", "/healthcheck/fail", "/drain_listeners", "/runtime_modify?a=b")
ADMIN_ONLY_GET = "/server_info"


async def test_the_admin_api_is_a_socket_only_its_user_can_open(stack_run: LocalStackRun) -> None:
    """The admin socket is 0600, owned by the user who ran `up`, in the 0700 state directory,
    and it is what the stack's state names; Envoy answers /ready on it."""
    socket_path = stack_run.state_dir / ENVOY_ADMIN_SOCKET
    info = socket_path.lstat()
    assert stat.S_ISSOCK(info.st_mode)
    assert (stat.S_IMODE(info.st_mode), info.st_uid) == (0o600, os.getuid())
    assert stat.S_IMODE(stack_run.state_dir.stat().st_mode) == 0o700
    assert StackState.load(stack_run.state_dir).admin == str(socket_path)
    async with admin_client(socket_path) as admin:
        assert (await admin.get("/ready")).text.strip() == "LIVE"


async def test_no_tcp_port_of_the_stack_lets_a_local_user_quit_envoy(
    stack_run: LocalStackRun,
) -> None:
    """Every TCP port any process of the stack listens on (found in /proc, announced or not)
    refuses the admin API's POSTs and its /server_info; Envoy is still live afterwards."""
    ports = listening_tcp_ports({stack_run.process.pid, *descendants(stack_run.process.pid)})
    envoy_pid = stack_run.components["envoy"][1]
    assert listening_tcp_ports({envoy_pid}), "Envoy's own listeners were not found"
    served = []
    async with httpx.AsyncClient(timeout=5) as http:
        for host, port in sorted(ports):
            base = f"http://{'[::1]' if host == '::1' else host}:{port}"
            for path in ADMIN_POSTS:
                try:
                    answer = await http.post(base + path)
                except httpx.HTTPError:
                    continue  # not HTTP/1.1 (authz's gRPC port): no admin API there either
                if answer.status_code == 200:
                    served.append(f"POST {base}{path}: {answer.text[:60]!r}")
            try:
                info = await http.get(base + ADMIN_ONLY_GET)
            except httpx.HTTPError:
                continue
            if "command_line_options" in info.text:
                served.append(f"GET {base}{ADMIN_ONLY_GET}")
    assert not served
    async with admin_client(stack_run.state_dir / ENVOY_ADMIN_SOCKET) as admin:
        assert (await admin.get("/ready")).text.strip() == "LIVE"
    assert stack_run.process.poll() is None
