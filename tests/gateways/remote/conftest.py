"""Fixtures of the outbound tests: the remote agents server and settings that point at it."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from gateways.remote.settings import RemoteSettings
from tests.gateways.remote.remotes import AGENTS, CARDS_ONLY, RemoteAgentServer, remote_agents


@pytest.fixture
def remotes(tmp_path: Path) -> Iterator[RemoteAgentServer]:
    with remote_agents(tmp_path) as server:
        yield server


def env_for(server: RemoteAgentServer, **extra: str) -> dict[str, str]:
    """Every agent of `server` allowlisted under its own name, loopback allowed."""
    names = (*AGENTS, *CARDS_ONLY)
    return {
        "ORRERY_A2A_REMOTE_AGENTS": ",".join(f"{name}={server.url(name)}" for name in names),
        "ORRERY_A2A_REMOTE_ALLOW_NETWORKS": "127.0.0.0/8",
        **extra,
    }


def settings_for(server: RemoteAgentServer, env: Mapping[str, str] | None = None) -> RemoteSettings:
    return RemoteSettings.from_env({**env_for(server), **(env or {})})
