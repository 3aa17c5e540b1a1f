"""`stack.envoy_admin`: the real Envoy stops accepting — readiness fails, listeners close — while
a connection already open is still answered (the first step of every ordered stop)."""

from __future__ import annotations

import socket
from pathlib import Path

import httpx
import pytest

from stack import envoy_admin
from tests.e2e.conftest import FakeAuthz, Recorder, envoy_for

pytestmark = [pytest.mark.envoy, pytest.mark.e2e]


def refused(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) != 0


async def test_envoy_stops_accepting_but_answers_on_open_connections(
    tmp_path: Path, recorder: Recorder, fake_authz: FakeAuthz
) -> None:
    """After stop_accepting: admin /ready is 503, a new connection is refused, and a request on
    a connection opened before is still forwarded (its answer says the connection will close)."""
    async with (
        envoy_for(tmp_path, authz_port=fake_authz.port, adapter_port=recorder.port) as envoy,
        httpx.AsyncClient(base_url=envoy.url, timeout=10) as open_before,
    ):
        card = "/.well-known/agent-card.json"
        assert (await open_before.get(card)).status_code == 200
        await envoy_admin.stop_accepting(envoy.admin)
        async with httpx.AsyncClient(timeout=5) as admin:
            assert (await admin.get(f"http://{envoy.admin}/ready")).status_code == 503
        assert refused(envoy.port)
        answer = await open_before.get(card)
    assert answer.status_code == 200
    assert answer.headers["connection"] == "close"
    assert [seen.path for seen in recorder.requests] == [card, card]


def test_the_command_names_an_admin_api_that_does_not_answer(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Nothing listening at the admin address: exit 1 and say so (a preStop hook's log)."""
    with socket.socket() as closed:  # bound, never listening: connections are refused
        closed.bind(("127.0.0.1", 0))
        admin = f"127.0.0.1:{closed.getsockname()[1]}"
        assert envoy_admin.main(["stop-accepting", admin]) == 1
    assert f"envoy admin {admin}: ClientConnectorError" in capsys.readouterr().err


def test_the_command_names_an_admin_socket_that_does_not_answer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An absolute path is the admin API's Unix socket (the local stack's): none there, exit 1."""
    admin = str(tmp_path / "envoy-admin.sock")
    assert envoy_admin.main(["stop-accepting", admin]) == 1
    assert f"envoy admin {admin}: UnixClientConnectorError" in capsys.readouterr().err
