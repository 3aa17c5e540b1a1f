"""Signed agent cards (A2A 1.0 §8.4), checked by code that is not ours: RFC 8785 from the
`rfc8785` package and JWS from `joserfc`, plus the a2a-sdk's own verifier; tampered cards fail
all of them."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
import rfc8785
from a2a.types import a2a_pb2 as pb
from a2a.utils.signing import (
    InvalidSignaturesError,
    NoSignatureError,
    create_signature_verifier,
)
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from google.protobuf.json_format import MessageToDict, ParseDict
from joserfc import jws
from joserfc.errors import JoseError
from joserfc.jwk import JWKRegistry

from adapter.card_signing import CardSigner, empty_values, load_key
from contract.identity import Principal
from runtime.errors import ConfigError
from tests.adapter.conftest import Server, running, settings_for
from tests.keys import PrivateKey, private_key

# RFC 9864 deprecates the JWS name "EdDSA" for "Ed25519"; PyJWT (so the a2a-sdk's verifier)
# knows only "EdDSA", which is what an Ed25519 key signs cards with here.
pytestmark = pytest.mark.filterwarnings("ignore:EdDSA is deprecated via RFC 9864")

CARD = "/.well-known/agent-card.json"
JWKS = "/.well-known/jwks.json"
ALGORITHMS = ["ES256", "ES384", "ES512", "EdDSA", "RS256"]
CALLER = Principal(
    kind="service", subject="svc", client="svc", agent="", role="operator", autonomy="L2"
)

# The card signer's algorithms (PS256 is not one of them).
CARD_ALGORITHMS = ("ES256", "ES384", "EdDSA", "RS256")


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def write_key(path: Path, key: PrivateKey) -> Path:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return path


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    return write_key(tmp_path / "card-key.pem", private_key("ES256"))


@pytest.fixture
async def signed(key_file: Path) -> AsyncIterator[Server]:
    async with running({"ORRERY_A2A_CARD_SIGNING_KEYS": str(key_file)}) as server:
        yield server


async def get(server: Server, path: str, **headers: str) -> httpx.Response:
    async with httpx.AsyncClient(base_url=server.base) as http:
        return await http.get(path, headers=headers)


def protected(signature: dict[str, Any]) -> dict[str, Any]:
    header = json.loads(unb64url(signature["protected"]))
    assert isinstance(header, dict)
    return header


def independently_verified(card: dict[str, Any], jwks: dict[str, Any]) -> list[str]:
    """The `kid` of every signature that verifies: the card without `signatures`, JCS by the
    `rfc8785` package, each signature checked by `joserfc` with the JWKS key its `kid` names."""
    payload = b64url(rfc8785.dumps({k: v for k, v in card.items() if k != "signatures"}))
    keys = {jwk["kid"]: jwk for jwk in jwks["keys"]}
    verified = []
    for signature in card.get("signatures", []):
        header = protected(signature)
        if header.get("kid") not in keys:
            continue
        key = JWKRegistry.import_key(keys[header["kid"]])
        compact = f"{signature['protected']}.{payload}.{signature['signature']}"
        try:
            jws.deserialize_compact(compact, key, algorithms=ALGORITHMS)
        except (JoseError, ValueError):
            continue
        verified.append(header["kid"])
    return verified


def sdk_verify(card: dict[str, Any], jwks: dict[str, Any]) -> None:
    """The a2a-sdk's verifier on the card as a client parses it; raises when nothing verifies."""
    keys = {jwk["kid"]: jwk for jwk in jwks["keys"]}

    def key_provider(kid: str | None, jku: str | None) -> jwt.PyJWK:
        if kid not in keys:
            raise jwt.PyJWKError(f"unknown kid {kid}")
        return jwt.PyJWK(keys[kid])

    create_signature_verifier(key_provider, ALGORITHMS)(ParseDict(card, pb.AgentCard()))


async def card_and_keys(server: Server) -> tuple[dict[str, Any], dict[str, Any]]:
    return (await get(server, CARD)).json(), (await get(server, JWKS)).json()


async def test_the_signed_card_verifies_with_independent_jcs_and_jws(signed: Server) -> None:
    """One signature per key; its protected header is {alg, typ: JOSE, kid, jku} (§8.4.2), the
    `jku` names this origin's key set, and rfc8785 + joserfc verify it with that key."""
    card, jwks = await card_and_keys(signed)
    (signature,) = card["signatures"]
    (jwk,) = jwks["keys"]
    assert protected(signature) == {
        "alg": "ES256",
        "typ": "JOSE",
        "kid": jwk["kid"],
        "jku": signed.base + JWKS,
    }
    assert (jwk["use"], jwk["alg"], jwk["kty"]) == ("sig", "ES256", "EC")
    assert "d" not in jwk  # the public half only
    assert independently_verified(card, jwks) == [jwk["kid"]]


async def test_the_signed_card_verifies_with_the_a2a_sdk_verifier(signed: Server) -> None:
    """The a2a-sdk's `create_signature_verifier` accepts the card a client parses."""
    card, jwks = await card_and_keys(signed)
    sdk_verify(card, jwks)


async def test_the_sdk_client_verifies_the_card_it_fetches(signed: Server) -> None:
    """`ClientFactory.create_from_url(..., signature_verifier=…)` with the served key set."""
    from a2a.client import ClientConfig, ClientFactory

    jwks = (await get(signed, JWKS)).json()

    def key_provider(kid: str | None, jku: str | None) -> jwt.PyJWK:
        (jwk,) = [key for key in jwks["keys"] if key["kid"] == kid]
        return jwt.PyJWK(jwk)

    async with signed.http(CALLER) as http:
        client = await ClientFactory(ClientConfig(httpx_client=http)).create_from_url(
            signed.base, signature_verifier=create_signature_verifier(key_provider, ALGORITHMS)
        )
        await client.close()


async def test_the_extended_card_is_signed_too(signed: Server) -> None:
    """GetExtendedAgentCard's card carries its own signature (not the public card's), and both
    the independent verifier and the SDK's accept it."""
    jwks = (await get(signed, JWKS)).json()
    async with signed.client(CALLER) as client:
        extended = await client.get_extended_agent_card(pb.GetExtendedAgentCardRequest())
    card = MessageToDict(extended)
    assert len(card["signatures"]) == 1
    assert [skill["id"] for skill in card["skills"]] != ["orrery"]
    assert independently_verified(card, jwks) == [jwks["keys"][0]["kid"]]
    sdk_verify(card, jwks)


def _changed_field(card: dict[str, Any]) -> None:
    card["supportedInterfaces"][0]["url"] = "https://attacker.example/a2a"


def _removed_requirement(card: dict[str, Any]) -> None:
    del card["securityRequirements"]


def _wrong_key(card: dict[str, Any]) -> None:
    """Re-signed by someone else's key, claiming our `kid` and `jku`."""
    (signature,) = card["signatures"]
    header = protected(signature)
    payload = b64url(rfc8785.dumps({k: v for k, v in card.items() if k != "signatures"}))
    attacker = JWKRegistry.generate_key("EC", "P-256")
    forged = jws.serialize_compact(header, unb64url(payload), attacker, algorithms=["ES256"])
    signature["signature"] = forged.rsplit(".", 1)[1]


def _alg_swap(card: dict[str, Any], jwks: dict[str, Any]) -> None:
    """HS256 keyed with our public key (the classic confusion), under our `kid`."""
    (signature,) = card["signatures"]
    header = {**protected(signature), "alg": "HS256"}
    encoded = b64url(json.dumps(header).encode())
    payload = b64url(rfc8785.dumps({k: v for k, v in card.items() if k != "signatures"}))
    secret = json.dumps(jwks["keys"][0]).encode()
    mac = hmac.new(secret, f"{encoded}.{payload}".encode(), hashlib.sha256).digest()
    signature.update(protected=encoded, signature=b64url(mac))


@pytest.mark.parametrize(
    "tamper", ["changed field", "removed requirement", "wrong key", "alg swap", "alg none"]
)
async def test_a_tampered_card_fails_every_verifier(signed: Server, tamper: str) -> None:
    """A changed interface URL, a dropped requirement, a signature by another key under our
    `kid`, or an algorithm swapped to HS256 or `none`: neither verifier accepts the card."""
    card, jwks = await card_and_keys(signed)
    if tamper == "changed field":
        _changed_field(card)
    elif tamper == "removed requirement":
        _removed_requirement(card)
    elif tamper == "wrong key":
        _wrong_key(card)
    elif tamper == "alg swap":
        _alg_swap(card, jwks)
    else:
        (signature,) = card["signatures"]
        none = {**protected(signature), "alg": "none"}
        signature.update(protected=b64url(json.dumps(none).encode()), signature="")
    assert independently_verified(card, jwks) == []
    with pytest.raises(InvalidSignaturesError):
        sdk_verify(card, jwks)


async def test_a_card_without_its_signature_is_not_verified(signed: Server) -> None:
    """A card stripped of `signatures` verifies with nothing (the SDK says there is none)."""
    card, jwks = await card_and_keys(signed)
    del card["signatures"]
    assert independently_verified(card, jwks) == []
    with pytest.raises(NoSignatureError):
        sdk_verify(card, jwks)


@pytest.mark.parametrize("alg", CARD_ALGORITHMS)
async def test_each_supported_key_type_signs_with_its_algorithm(tmp_path: Path, alg: str) -> None:
    """EC P-256/P-384, Ed25519 and RSA keys sign ES256/ES384/EdDSA/RS256 cards that verify."""
    path = write_key(tmp_path / "key.pem", private_key(alg))
    async with running({"ORRERY_A2A_CARD_SIGNING_KEYS": str(path)}) as server:
        card, jwks = await card_and_keys(server)
    assert protected(card["signatures"][0])["alg"] == alg
    assert independently_verified(card, jwks) == [jwks["keys"][0]["kid"]]
    sdk_verify(card, jwks)


async def test_rotation_signs_with_every_listed_key_and_publishes_each(tmp_path: Path) -> None:
    """Two key files: the card carries two signatures, the key set both keys; a client that
    trusts only one of them (old or new) still verifies the card."""
    old = write_key(tmp_path / "old.pem", private_key("ES256"))
    new = write_key(tmp_path / "new.pem", private_key("EdDSA"))
    async with running({"ORRERY_A2A_CARD_SIGNING_KEYS": f"{new},{old}"}) as server:
        card, jwks = await card_and_keys(server)
    kids = [jwk["kid"] for jwk in jwks["keys"]]
    assert [protected(signature)["kid"] for signature in card["signatures"]] == kids
    assert independently_verified(card, jwks) == kids
    for jwk in jwks["keys"]:
        sdk_verify(card, {"keys": [jwk]})


async def test_without_keys_the_card_is_unsigned_and_the_key_set_empty(server: Server) -> None:
    """Signing is optional (§8.4 MAY): no ORRERY_A2A_CARD_SIGNING_KEYS, no signatures."""
    card, jwks = await card_and_keys(server)
    assert "signatures" not in card
    assert jwks == {"keys": []}


async def test_the_etag_is_the_same_on_every_replica(key_file: Path) -> None:
    """Two adapters with one key serve different signature bytes (ECDSA is randomised) but one
    weak ETag, so a client revalidating against the other replica gets 304."""
    env = {
        "ORRERY_A2A_CARD_SIGNING_KEYS": str(key_file),
        "ORRERY_A2A_PUBLIC_URL": "http://127.0.0.1:8080/a2a",  # one edge, two replicas
    }
    async with running(env) as first, running(env) as second:
        one, two = await get(first, CARD), await get(second, CARD)
        assert one.json()["signatures"] != two.json()["signatures"]
        assert one.headers["etag"] == two.headers["etag"]
        assert one.headers["etag"].startswith('W/"')
        again = await get(second, CARD, **{"If-None-Match": one.headers["etag"]})
    assert again.status_code == 304


async def test_the_key_set_is_cacheable(signed: Server) -> None:
    """The JWKS has a strong ETag, Cache-Control like the card's, and revalidates with 304."""
    first = await get(signed, JWKS)
    assert first.headers["cache-control"] == "public, max-age=300"
    again = await get(signed, JWKS, **{"If-None-Match": first.headers["etag"]})
    assert again.status_code == 304


@pytest.mark.parametrize(
    ("contents", "problem"),
    [
        (None, "cannot read it"),
        (b"not a key", "not an unencrypted PEM private key"),
        ("rsa1024", "not a supported private key"),
        ("encrypted", "not an unencrypted PEM private key"),
        ("public", "not an unencrypted PEM private key"),
    ],
)
def test_an_unusable_key_file_is_a_configuration_error(
    tmp_path: Path, contents: bytes | str | None, problem: str
) -> None:
    """A missing file, junk, a short RSA key, an encrypted key or a public key stops start-up
    naming the variable and the file — never the file's contents."""
    path = tmp_path / "key.pem"
    if contents == "rsa1024":
        short = rsa.generate_private_key(public_exponent=65537, key_size=1024)  # noqa: S505 - refused
        write_key(path, short)
    elif contents == "encrypted":
        path.write_bytes(
            private_key("ES256").private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.BestAvailableEncryption(b"pw"),
            )
        )
    elif contents == "public":
        path.write_bytes(
            private_key("ES256")
            .public_key()
            .public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
    elif isinstance(contents, bytes):
        path.write_bytes(contents)
    with pytest.raises(ConfigError) as refused:
        settings_for("http://127.0.0.1:1", {"ORRERY_A2A_CARD_SIGNING_KEYS": str(path)})
    message = str(refused.value)
    assert f"ORRERY_A2A_CARD_SIGNING_KEYS: {path}: {problem}" in message
    assert "BEGIN" not in message


def test_the_same_key_twice_is_refused(key_file: Path) -> None:
    """Listing one key twice is a mistake, not rotation."""
    with pytest.raises(ConfigError, match="a key is listed twice"):
        settings_for(
            "http://127.0.0.1:1", {"ORRERY_A2A_CARD_SIGNING_KEYS": f"{key_file},{key_file}"}
        )


def test_a_card_with_an_empty_value_is_never_signed(key_file: Path) -> None:
    """`{"bearer": {}}` canonicalises one way by §8.4.1 and another by the SDKs: refused."""
    card = pb.AgentCard(
        name="n",
        security_requirements=[pb.SecurityRequirement(schemes={"bearer": pb.StringList()})],
    )
    assert empty_values(MessageToDict(card)) == ["$.securityRequirements[0].schemes.bearer"]
    with pytest.raises(ValueError, match="empty values"):
        CardSigner([load_key(key_file)], "https://edge.example/.well-known/jwks.json").sign(card)


async def test_no_card_the_adapter_builds_has_an_empty_value(server: Server) -> None:
    """The public and the extended card: no empty string, list or object anywhere."""
    card = (await get(server, CARD)).json()
    async with server.client(CALLER) as client:
        extended = await client.get_extended_agent_card(pb.GetExtendedAgentCardRequest())
    assert empty_values(card) == []
    assert empty_values(MessageToDict(extended)) == []
