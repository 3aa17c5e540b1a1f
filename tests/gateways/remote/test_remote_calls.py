"""Calling a remote A2A agent: the a2a-sdk client through the guarded transport, against the
a2a-sdk's own server (tests/gateways/remote/remotes.py). Every refusal has its reason code."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from gateways.remote.cards import CardPins
from gateways.remote.client import RemoteAgents
from gateways.remote.errors import RemoteAgentError
from gateways.remote.metrics import RemoteMetrics
from gateways.remote.settings import RemoteSettings
from tests.certs import Certs, make_certs
from tests.gateways.remote.conftest import env_for, settings_for
from tests.gateways.remote.remotes import RemoteAgentServer, remote_agents

KEY = "delegated:alice"


def agents(settings: RemoteSettings) -> tuple[RemoteAgents, CollectorRegistry]:
    registry = CollectorRegistry()
    return RemoteAgents(settings, RemoteMetrics(registry)), registry


def calls(registry: CollectorRegistry, agent: str, outcome: str) -> float | None:
    return registry.get_sample_value(
        "orrery_a2a_remote_calls_total", {"agent": agent, "outcome": outcome}
    )


async def refusal(settings: RemoteSettings, name: str, text: str = "hi") -> RemoteAgentError:
    remote, _ = agents(settings)
    with pytest.raises(RemoteAgentError) as caught:
        await remote.call(name, text, principal_key=KEY)
    return caught.value


async def test_an_allowlisted_agent_answers_through_the_sdk_client(
    remotes: RemoteAgentServer,
) -> None:
    """The echo agent's reply comes back as text; the request carried the hop header and no
    credential (none configured)."""
    remote, registry = agents(settings_for(remotes))
    assert await remote.call("echo", "how is checkout?", principal_key=KEY) == (
        "echo: how is checkout?"
    )
    (sent,) = remotes.headers("/echo/a2a")
    assert sent["x-orrery-hop"] == "1"
    assert "authorization" not in sent
    assert calls(registry, "echo", "ok") == 1


async def test_every_request_of_a_call_carries_the_hop_header(remotes: RemoteAgentServer) -> None:
    """The card, its key set and the call itself: a receiving Orrery edge refuses each."""
    remote, _ = agents(settings_for(remotes))
    await remote.call("echo", "hi", principal_key=KEY)
    seen = remotes.headers("/echo/")
    assert {len(seen)} == {3}  # card, jwks, SendMessage
    assert all(headers["x-orrery-hop"] == "1" for headers in seen)


async def test_each_call_logs_one_event_without_the_token_or_the_text(
    remotes: RemoteAgentServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """`remote_call {agent, outcome, principal, seconds}`: never the token, message or reply."""
    token = tmp_path / "echo.token"
    token.write_text("secret-outbound-token", encoding="utf-8")
    remote, _ = agents(settings_for(remotes, {"ORRERY_A2A_REMOTE_ECHO_TOKEN_FILE": str(token)}))
    caplog.set_level(logging.INFO, logger="gateways.remote")
    await remote.call("echo", "private question", principal_key=KEY)
    (event,) = [record for record in caplog.records if record.getMessage() == "remote_call"]
    fields = event.orrery_fields  # type: ignore[attr-defined]  # set by runtime.logs
    assert {k: fields[k] for k in ("agent", "outcome", "principal")} == {
        "agent": "echo",
        "outcome": "ok",
        "principal": KEY,
    }
    assert "secret-outbound-token" not in caplog.text
    assert "private question" not in caplog.text


async def test_the_token_comes_from_its_file_and_a_rotation_is_used_next_call(
    remotes: RemoteAgentServer, tmp_path: Path
) -> None:
    """`_TOKEN_FILE` is re-read when it changes: the next call carries the new token."""
    token = tmp_path / "echo.token"
    token.write_text("first-token\n", encoding="utf-8")
    remote, _ = agents(settings_for(remotes, {"ORRERY_A2A_REMOTE_ECHO_TOKEN_FILE": str(token)}))
    await remote.call("echo", "one", principal_key=KEY)
    token.write_text("second-token-rotated\n", encoding="utf-8")
    await remote.call("echo", "two", principal_key=KEY)
    calls = remotes.headers("/echo/a2a")
    assert [headers["authorization"] for headers in calls] == [
        "Bearer first-token",
        "Bearer second-token-rotated",
    ]


async def test_an_unreadable_token_file_is_a_refusal_without_a_request(
    remotes: RemoteAgentServer, tmp_path: Path
) -> None:
    """No token, no call: `credentials_unavailable`, and the agent never hears of it."""
    settings = settings_for(
        remotes, {"ORRERY_A2A_REMOTE_ECHO_TOKEN_FILE": str(tmp_path / "missing")}
    )
    assert (await refusal(settings, "echo")).reason == "credentials_unavailable"
    assert remotes.headers("/echo/a2a") == []


async def test_a_name_off_the_allowlist_is_refused(remotes: RemoteAgentServer) -> None:
    """Only allowlisted names are callable; the metric's agent label is `-`, not the name."""
    remote, registry = agents(settings_for(remotes))
    with pytest.raises(RemoteAgentError) as caught:
        await remote.call("stranger", "hi", principal_key=KEY)
    assert caught.value.reason == "not_allowlisted"
    assert calls(registry, "-", "not_allowlisted") == 1


async def test_a_card_url_that_redirects_is_refused(remotes: RemoteAgentServer) -> None:
    """A 3xx is never followed: `redirect_refused`, and the echo card is never fetched."""
    assert (await refusal(settings_for(remotes), "moved")).reason == "redirect_refused"
    assert remotes.headers("/echo/") == []


async def test_a_reply_with_a_data_part_is_refused(remotes: RemoteAgentServer) -> None:
    """Only text reaches the agent: a data part refuses the whole reply."""
    assert (await refusal(settings_for(remotes), "pictures")).reason == "reply_not_text"


async def test_a_reply_over_the_message_limit_is_refused(remotes: RemoteAgentServer) -> None:
    """Text longer than the message limit (8192 characters) is `reply_too_long`."""
    assert (await refusal(settings_for(remotes), "chatty")).reason == "reply_too_long"


async def test_a_body_over_the_byte_cap_is_refused(remotes: RemoteAgentServer) -> None:
    """A response body over `ORRERY_A2A_REMOTE_MAX_BODY_BYTES` is never read whole."""
    assert (await refusal(settings_for(remotes), "huge")).reason == "too_large"


async def test_a_garbled_answer_is_an_error_not_a_crash(remotes: RemoteAgentServer) -> None:
    """A result the SDK cannot parse as an A2A response ends the call with `remote_error`."""
    assert (await refusal(settings_for(remotes), "garbled")).reason == "remote_error"


async def test_a_loopback_agent_is_refused_unless_its_network_is_allowed(
    remotes: RemoteAgentServer,
) -> None:
    """Private, loopback and link-local addresses need `ORRERY_A2A_REMOTE_ALLOW_NETWORKS`."""
    env = {**env_for(remotes), "ORRERY_A2A_REMOTE_ALLOW_NETWORKS": ""}
    assert (await refusal(RemoteSettings.from_env(env), "echo")).reason == "address_refused"
    assert remotes.recorder.seen == []


async def test_a_pinned_card_key_must_have_signed_the_card(remotes: RemoteAgentServer) -> None:
    """`_CARD_KEYS` naming the echo card's signing key passes; another key refuses the card."""
    pinned = settings_for(remotes, {"ORRERY_A2A_REMOTE_ECHO_CARD_KEYS": remotes.echo_key})
    remote, _ = agents(pinned)
    assert await remote.call("echo", "hi", principal_key=KEY) == "echo: hi"
    other = settings_for(remotes, {"ORRERY_A2A_REMOTE_ECHO_CARD_KEYS": "A" * 43})
    assert (await refusal(other, "echo")).reason == "card_signature_invalid"


async def test_a_signed_card_verifies_over_all_its_interfaces_and_pins_json_rpc_only(
    remotes: RemoteAgentServer,
) -> None:
    """The echo card is signed over its JSON-RPC and HTTP+JSON interfaces; the pin keeps JSON-RPC
    only."""
    settings = settings_for(remotes)
    pinned = await CardPins(settings).card(settings.agents["echo"])
    assert [i.protocol_binding for i in pinned.supported_interfaces] == ["JSONRPC"]
    assert len(pinned.signatures) == 1


async def test_a_card_changed_after_signing_is_refused(remotes: RemoteAgentServer) -> None:
    """The echo card's signature over a changed description verifies with no key."""
    assert (await refusal(settings_for(remotes), "forged")).reason == "card_signature_invalid"
    assert remotes.headers("/echo/a2a") == []


async def test_a_card_that_sends_calls_to_another_origin_is_refused(
    remotes: RemoteAgentServer,
) -> None:
    """The JSON-RPC interface must be on the card URL's own origin."""
    assert (await refusal(settings_for(remotes), "elsewhere")).reason == "insecure_url"


async def test_an_unsigned_card_cannot_satisfy_a_pinned_key(remotes: RemoteAgentServer) -> None:
    """A pinned key makes a signature required: the unsigned `pictures` card is refused."""
    pinned = settings_for(remotes, {"ORRERY_A2A_REMOTE_PICTURES_CARD_KEYS": remotes.echo_key})
    assert (await refusal(pinned, "pictures")).reason == "card_signature_invalid"


async def test_the_card_is_fetched_once_and_pinned(remotes: RemoteAgentServer) -> None:
    """Two calls, one card fetch: a card changed after the first call cannot redirect calls."""
    remote, _ = agents(settings_for(remotes))
    await remote.call("echo", "one", principal_key=KEY)
    await remote.call("echo", "two", principal_key=KEY)
    assert len(remotes.headers("/echo/card")) == 1
    assert len(remotes.headers("/echo/a2a")) == 2


async def test_calls_per_principal_are_capped(remotes: RemoteAgentServer) -> None:
    """Over `_MAX_CALLS_PER_PRINCIPAL` at once is `busy`; another principal is not affected."""
    remote, _ = agents(settings_for(remotes, {"ORRERY_A2A_REMOTE_MAX_CALLS_PER_PRINCIPAL": "1"}))
    first = asyncio.create_task(remote.call("echo", "one", principal_key=KEY))
    await asyncio.sleep(0)  # the first call holds its slot from its first step
    with pytest.raises(RemoteAgentError) as caught:
        await remote.call("echo", "two", principal_key=KEY)
    assert caught.value.reason == "busy"
    assert await remote.call("echo", "three", principal_key="delegated:bob") == "echo: three"
    assert await first == "echo: one"


async def test_a_remote_that_does_not_answer_in_time_is_a_timeout(
    remotes: RemoteAgentServer,
) -> None:
    """The whole call is bounded by `ORRERY_A2A_REMOTE_TIMEOUT`; the slot is freed after it."""
    settings = settings_for(
        remotes,
        {"ORRERY_A2A_REMOTE_TIMEOUT": "500ms", "ORRERY_A2A_REMOTE_MAX_CALLS_PER_PRINCIPAL": "1"},
    )
    remote, _ = agents(settings)
    with pytest.raises(RemoteAgentError) as caught:
        await remote.call("slow", "hi", principal_key=KEY)
    assert caught.value.reason == "timeout"
    assert await remote.call("echo", "next", principal_key=KEY) == "echo: next"


@pytest.fixture
def tls_remotes(tmp_path: Path) -> Iterator[tuple[RemoteAgentServer, Certs]]:
    """The remote agents over TLS at `https://localhost:PORT` (a test CA's certificate)."""
    addresses = {
        info[4][0] for info in socket.getaddrinfo("localhost", 443, type=socket.SOCK_STREAM)
    }
    if addresses != {"127.0.0.1"}:
        pytest.skip(f"localhost resolves to {sorted(addresses)} here, not only 127.0.0.1")
    certs = make_certs(tmp_path / "certs")
    with remote_agents(tmp_path, certs) as server:
        yield server, certs


async def test_an_https_agent_is_verified_for_its_name_at_the_checked_address(
    tls_remotes: tuple[RemoteAgentServer, Certs],
) -> None:
    """`https://localhost`: resolved and connected by address, its certificate verified against
    `ORRERY_A2A_REMOTE_CA_FILE` for the name (SNI), the signed card's key set fetched over TLS."""
    server, certs = tls_remotes
    settings = settings_for(server, {"ORRERY_A2A_REMOTE_CA_FILE": str(certs.ca)})
    remote, _ = agents(settings)
    assert await remote.call("echo", "over tls", principal_key=KEY) == "echo: over tls"
    assert server.headers("/echo/a2a")[0]["host"] == server.base.removeprefix("https://")


async def test_an_https_agent_whose_certificate_is_not_trusted_is_refused(
    tls_remotes: tuple[RemoteAgentServer, Certs],
) -> None:
    """Without the test CA the default bundle does not trust the certificate: no card, no call."""
    server, _ = tls_remotes
    assert (await refusal(settings_for(server), "echo")).reason == "card_unavailable"
    assert server.recorder.seen == []
