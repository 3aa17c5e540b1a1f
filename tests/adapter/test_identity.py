"""The principal assertion is the only identity, checked before anything else runs."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from contract.assertion import AssertionKeys, new_keys_spec
from contract.jose import b64url_encode
from tests.adapter.conftest import (
    KEYS,
    Server,
    assertion_headers,
    delegated,
    human,
)

CALL = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}}


async def post(server: Server, headers: dict[str, str], body: object = CALL) -> httpx.Response:
    async with httpx.AsyncClient(base_url=server.base) as http:
        return await http.post("/a2a", json=body, headers={"A2A-Version": "1.0", **headers})


def assert_401(response: httpx.Response, reason: str = "assertion_invalid") -> None:
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"] == 'Bearer realm="orrery-a2a"'
    assert response.json()["error"] == reason


async def test_missing_assertion_is_401(server: Server) -> None:
    """No x-orrery-principal: 401 with a Bearer challenge."""
    assert_401(await post(server, {"x-request-id": "r1"}))


async def test_assertion_for_another_request_is_401(server: Server) -> None:
    """An assertion replayed on a request with another x-request-id is refused."""
    headers = assertion_headers(delegated())
    headers["x-request-id"] = "some-other-request"
    assert_401(await post(server, headers))


async def test_missing_request_id_is_401(server: Server) -> None:
    """An assertion without the request id it is bound to is refused."""
    headers = assertion_headers(delegated())
    del headers["x-request-id"]
    assert_401(await post(server, headers))


async def test_expired_assertion_is_401(server: Server) -> None:
    """An assertion older than its 30 s lifetime (plus leeway) is refused as expired."""
    headers = assertion_headers(delegated(), now=int(time.time()) - 120)
    assert_401(await post(server, headers), "assertion_expired")


async def test_assertion_signed_with_unknown_key_is_401(server: Server) -> None:
    """A forged assertion (another key) is refused."""
    headers = assertion_headers(delegated(), keys=AssertionKeys.parse(new_keys_spec("test")))
    assert_401(await post(server, headers))


async def test_approvals_surface_assertion_is_refused_on_a2a(server: Server) -> None:
    """An assertion minted for the approvals surface does not open /a2a."""
    assert_401(await post(server, assertion_headers(human(), "approvals")))


async def test_human_principal_is_refused_on_a2a(server: Server) -> None:
    """A human is never a caller on the A2A surface."""
    assert_401(await post(server, assertion_headers(human(), "a2a")))


async def test_duplicated_assertion_header_is_401(server: Server) -> None:
    """Two x-orrery-principal headers: neither is picked."""
    good = assertion_headers(delegated())
    async with httpx.AsyncClient(base_url=server.base) as http:
        response = await http.post(
            "/a2a",
            json=CALL,
            headers=[
                ("A2A-Version", "1.0"),
                ("x-request-id", good["x-request-id"]),
                ("x-orrery-principal", good["x-orrery-principal"]),
                ("x-orrery-principal", good["x-orrery-principal"]),
            ],
        )
    assert_401(response)


async def test_non_ascii_kid_is_401_not_500(server: Server) -> None:
    """A crafted header with a non-ASCII kid is refused like any forgery (no server error)."""

    def b64(value: object) -> str:
        return b64url_encode(json.dumps(value).encode())

    forged = b64({"alg": "HS256", "kid": "\u00e9"}) + "." + b64({"sub": "x"}) + ".AAAA"
    assert_401(await post(server, {"x-request-id": "r", "x-orrery-principal": forged}))


async def test_non_ascii_request_id_is_401_not_500(server: Server) -> None:
    """A valid assertion with a non-ASCII x-request-id on the request is refused cleanly."""
    headers = assertion_headers(delegated())
    async with httpx.AsyncClient(base_url=server.base) as http:
        response = await http.post(
            "/a2a",
            json=CALL,
            headers=[
                (b"A2A-Version", b"1.0"),
                (b"x-orrery-principal", headers["x-orrery-principal"].encode()),
                (b"x-request-id", "r\u00e9".encode()),
            ],
        )
    assert_401(response)


async def test_401_comes_before_the_body_is_parsed(server: Server) -> None:
    """Garbage from an unauthenticated caller gets 401, not a JSON-RPC parse error."""
    async with httpx.AsyncClient(base_url=server.base) as http:
        response = await http.post(
            "/a2a", content=b"{not json", headers={"Content-Type": "application/json"}
        )
    assert_401(response)


@pytest.mark.parametrize("header", ["x-orrery-principal-key", "x-orrery-subject", "x-user"])
async def test_other_identity_headers_are_ignored(server: Server, header: str) -> None:
    """Headers that look like identity say nothing: without an assertion it is still 401."""
    assert_401(await post(server, {"x-request-id": "r", header: "admin"}))


async def test_valid_assertion_reaches_a2a(server: Server) -> None:
    """With a valid assertion the call is processed (here: an unknown task, -32001)."""
    response = await post(server, assertion_headers(delegated()))
    assert response.status_code == 200
    assert response.json()["error"]["code"] == -32001
    assert KEYS.signing_kid == "test"
