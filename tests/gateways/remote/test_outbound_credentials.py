"""The outbound token from an OAuth token endpoint: client credentials or RFC 8693 token exchange,
asked through the guarded transport, cached until shortly before expiry, and never the caller's."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry

from gateways.remote.client import RemoteAgents
from gateways.remote.credentials import ACCESS_TOKEN_TYPE, TOKEN_EXCHANGE
from gateways.remote.errors import RemoteAgentError
from gateways.remote.metrics import RemoteMetrics
from runtime.errors import ConfigError
from tests.gateways.remote.conftest import settings_for
from tests.gateways.remote.remotes import RemoteAgentServer

KEY = "delegated:alice"
SECRET = "client-secret-value"


@dataclass
class TokenEndpoint:
    """An OAuth token endpoint: records each form, issues `issued-N` for `expires_in`."""

    url: str = ""
    expires_in: int = 3600
    status: int = 200
    forms: list[dict[str, str]] = field(default_factory=list)
    auth: list[str] = field(default_factory=list)


@pytest.fixture
async def endpoint() -> AsyncIterator[TokenEndpoint]:
    state = TokenEndpoint()

    async def issue(request: web.Request) -> web.Response:
        state.forms.append({k: str(v) for k, v in (await request.post()).items()})
        state.auth.append(request.headers.get("Authorization", ""))
        body: dict[str, Any] = {
            "access_token": f"issued-{len(state.forms)}",
            "token_type": "Bearer",
            "expires_in": state.expires_in,
        }
        return web.json_response(
            body if state.status == 200 else {"error": "invalid_client"}, status=state.status
        )

    app = web.Application()
    app.router.add_post("/token", issue)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    state.url = f"http://127.0.0.1:{runner.addresses[0][1]}/token"
    try:
        yield state
    finally:
        await runner.cleanup()


def remote_with(
    server: RemoteAgentServer, endpoint: TokenEndpoint, tmp_path: Path, **extra: str
) -> RemoteAgents:
    secret = tmp_path / "client-secret"
    secret.write_text(SECRET, encoding="utf-8")
    env = {
        "ORRERY_A2A_REMOTE_ECHO_TOKEN_URL": endpoint.url,
        "ORRERY_A2A_REMOTE_ECHO_CLIENT_ID": "orrery-outbound",
        "ORRERY_A2A_REMOTE_ECHO_CLIENT_SECRET_FILE": str(secret),
        "ORRERY_A2A_REMOTE_ECHO_AUDIENCE": "https://echo.example/",
        **{f"ORRERY_A2A_REMOTE_ECHO_{name}": value for name, value in extra.items()},
    }
    return RemoteAgents(settings_for(server, env), RemoteMetrics(CollectorRegistry()))


def bearers(server: RemoteAgentServer) -> list[str]:
    return [headers["authorization"] for headers in server.headers("/echo/a2a")]


async def test_client_credentials_token_is_sent_and_kept_until_it_expires(
    remotes: RemoteAgentServer, endpoint: TokenEndpoint, tmp_path: Path
) -> None:
    """One token request (Basic client auth, the audience), two calls carrying its token."""
    remote = remote_with(remotes, endpoint, tmp_path)
    await remote.call("echo", "one", principal_key=KEY)
    await remote.call("echo", "two", principal_key=KEY)
    assert endpoint.forms == [
        {"grant_type": "client_credentials", "audience": "https://echo.example/"}
    ]
    basic = base64.b64encode(f"orrery-outbound:{SECRET}".encode()).decode()
    assert endpoint.auth == [f"Basic {basic}"]
    assert bearers(remotes) == ["Bearer issued-1", "Bearer issued-1"]


async def test_a_token_about_to_expire_is_replaced(
    remotes: RemoteAgentServer, endpoint: TokenEndpoint, tmp_path: Path
) -> None:
    """A token that expires within the 30 s margin is asked for again at the next call."""
    endpoint.expires_in = 10
    remote = remote_with(remotes, endpoint, tmp_path)
    await remote.call("echo", "one", principal_key=KEY)
    await remote.call("echo", "two", principal_key=KEY)
    assert bearers(remotes) == ["Bearer issued-1", "Bearer issued-2"]


async def test_token_exchange_sends_the_subject_and_this_platform_as_actor(
    remotes: RemoteAgentServer, endpoint: TokenEndpoint, tmp_path: Path
) -> None:
    """RFC 8693: the subject token and the actor token from their files, the remote's audience."""
    subject = tmp_path / "subject.token"
    subject.write_text("the-subject-token", encoding="utf-8")
    actor = tmp_path / "actor.token"
    actor.write_text("orrery-platform-token", encoding="utf-8")
    remote = remote_with(
        remotes,
        endpoint,
        tmp_path,
        GRANT="token_exchange",
        SUBJECT_TOKEN_FILE=str(subject),
        ACTOR_TOKEN_FILE=str(actor),
    )
    await remote.call("echo", "hi", principal_key=KEY)
    assert endpoint.forms == [
        {
            "grant_type": TOKEN_EXCHANGE,
            "subject_token": "the-subject-token",
            "subject_token_type": ACCESS_TOKEN_TYPE,
            "requested_token_type": ACCESS_TOKEN_TYPE,
            "actor_token": "orrery-platform-token",
            "actor_token_type": ACCESS_TOKEN_TYPE,
            "audience": "https://echo.example/",
        }
    ]
    assert bearers(remotes) == ["Bearer issued-1"]


async def test_a_refusing_token_endpoint_is_a_refusal_that_names_no_secret(
    remotes: RemoteAgentServer, endpoint: TokenEndpoint, tmp_path: Path
) -> None:
    """No token, no call: `credentials_unavailable`, and the text holds no credential."""
    endpoint.status = 401
    remote = remote_with(remotes, endpoint, tmp_path)
    with pytest.raises(RemoteAgentError) as caught:
        await remote.call("echo", "hi", principal_key=KEY)
    assert caught.value.reason == "credentials_unavailable"
    assert SECRET not in str(caught.value)
    assert remotes.headers("/echo/a2a") == []


def test_token_exchange_needs_a_subject_token_file(
    remotes: RemoteAgentServer, tmp_path: Path
) -> None:
    """`_GRANT=token_exchange` without `_SUBJECT_TOKEN_FILE` is a start-up problem."""
    with pytest.raises(ConfigError) as caught:
        remote_with(
            remotes,
            TokenEndpoint(url="https://idp.example/token"),
            tmp_path,
            GRANT="token_exchange",
        )
    assert caught.value.problems == ["ORRERY_A2A_REMOTE_ECHO_SUBJECT_TOKEN_FILE: is required"]
