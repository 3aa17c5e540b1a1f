"""Signed agent cards (A2A 1.0 §8.4) and the key set that verifies them.

A card says where to send requests and which credentials to send, so a client that trusts a card
it fetched over a network it does not control can be sent elsewhere. A signature lets it check
that the card is the one the operator published. The keys come from configuration only:
`ORRERY_A2A_CARD_SIGNING_KEYS` lists PEM private key files (a mounted Secret, or the per-run key of
`orrery-a2a up`). Every listed key signs every card, and every listed key's public half is
published at `/.well-known/jwks.json` on the card's origin (routed by Envoy without authz), whose
URL each signature's protected header carries as `jku`, with the key's RFC 7638 thumbprint as
`kid`. Rotation: list the new key beside the old one (cards carry both signatures), let clients
and caches pick it up, then drop the old one.

What is signed (§8.4.1): the card without `signatures`, canonicalised with RFC 8785 (JCS). The
spec and the a2a-sdk disagree about empty values: the spec keeps a map entry whose value is an
empty object (`"bearer": {}`) and required fields at their default, while the Python and JS SDKs
drop every empty string, list and object before canonicalising (a2aproject/A2A#2122). A card
without any empty value has the same canonical form under every reading, so `sign` refuses a
card holding one (`empty_values`), and the card builder never makes one. Signing itself is the
a2a-sdk's (`a2a.utils.signing`), so what the SDK's verifier checks is what was signed; the tests
verify with independent JCS and JWS libraries too.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from a2a.types import a2a_pb2 as pb
from a2a.utils.signing import create_agent_card_signer
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from google.protobuf.json_format import MessageToDict
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

from contract.jose import jwk_thumbprint

JWKS_PATH = "/.well-known/jwks.json"
JOSE_TYPE = "JOSE"  # §8.4.2: `typ` SHOULD be "JOSE"
MIN_RSA_BITS = 2048
_EC_ALGORITHMS = {"secp256r1": "ES256", "secp384r1": "ES384", "secp521r1": "ES512"}

PrivateKey = ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey | rsa.RSAPrivateKey


@dataclass(frozen=True, slots=True, eq=False)
class CardSigningKey:
    """One configured key: its algorithm, its public JWK (with `kid`), and the private half."""

    path: Path
    alg: str
    kid: str
    public_jwk: dict[str, Any]
    private: PrivateKey


def _algorithm(key: object, path: Path) -> str:
    """The one JWS algorithm each supported key type signs with; anything else is refused."""
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return "EdDSA"
    if isinstance(key, ec.EllipticCurvePrivateKey) and key.curve.name in _EC_ALGORITHMS:
        return _EC_ALGORITHMS[key.curve.name]
    if isinstance(key, rsa.RSAPrivateKey) and key.key_size >= MIN_RSA_BITS:
        return "RS256"
    raise ValueError(
        f"{path}: not a supported private key (EC P-256/384/521, Ed25519, or RSA of at least"
        f" {MIN_RSA_BITS} bits)"
    )


def _public_jwk(key: PrivateKey, alg: str) -> dict[str, Any]:
    public = key.public_key()
    jwk: dict[str, Any]
    if isinstance(public, ed25519.Ed25519PublicKey):
        jwk = OKPAlgorithm.to_jwk(public, as_dict=True)
    elif isinstance(public, ec.EllipticCurvePublicKey):
        jwk = ECAlgorithm.to_jwk(public, as_dict=True)
    else:
        jwk = RSAAlgorithm.to_jwk(public, as_dict=True)
    jwk.pop("kid", None)
    return {**jwk, "kid": jwk_thumbprint(jwk), "use": "sig", "alg": alg}


def load_key(path: Path) -> CardSigningKey:
    """One PEM private key file (PKCS#8 or traditional, unencrypted); `ValueError` names the file
    and what is wrong, never its contents."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ValueError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError):
        raise ValueError(f"{path}: not an unencrypted PEM private key") from None
    alg = _algorithm(key, path)
    private: PrivateKey = key  # type: ignore[assignment]  # _algorithm admitted only these
    jwk = _public_jwk(private, alg)
    return CardSigningKey(path=path, alg=alg, kid=jwk["kid"], public_jwk=jwk, private=private)


def parse_key_files(text: str) -> tuple[CardSigningKey, ...]:
    """`ORRERY_A2A_CARD_SIGNING_KEYS`: comma-separated PEM files, each a distinct key."""
    paths = [Path(item.strip()) for item in text.split(",") if item.strip()]
    if not paths:
        raise ValueError("no key file listed")
    keys = tuple(load_key(path) for path in paths)
    if len({key.kid for key in keys}) != len(keys):
        raise ValueError("a key is listed twice")
    return keys


def empty_values(value: Any, path: str = "$") -> list[str]:
    """JSON paths of every empty string, list or object in `value`: where the spec's reading of
    §8.4.1 and the SDKs' would canonicalise the card differently."""
    if isinstance(value, dict):
        found = [path] if not value else []
        for name, member in value.items():
            found += empty_values(member, f"{path}.{name}")
        return found
    if isinstance(value, list):
        found = [path] if not value else []
        for index, item in enumerate(value):
            found += empty_values(item, f"{path}[{index}]")
        return found
    return [path] if value == "" else []


class CardSigner:
    """Signs cards with every configured key and serves their public halves as a JWKS."""

    def __init__(self, keys: Sequence[CardSigningKey], jku: str) -> None:
        self._signers: list[Callable[[pb.AgentCard], pb.AgentCard]] = [
            create_agent_card_signer(
                key.private,  # type: ignore[arg-type]  # PyJWT signs with a key object as is
                {"alg": key.alg, "typ": JOSE_TYPE, "kid": key.kid, "jku": jku},
            )
            for key in keys
        ]
        self.jwks = {"keys": [key.public_jwk for key in keys]}

    def sign(self, card: pb.AgentCard) -> pb.AgentCard:
        """`card` with one signature per key (any it carried replaced); `ValueError` if it holds
        an empty value, whose canonical form verifiers would not agree on."""
        del card.signatures[:]
        empty = empty_values(MessageToDict(card))
        if empty:
            raise ValueError(f"the card holds empty values no signature can cover: {empty}")
        for signer in self._signers:
            signer(card)
        return card


def etag(body: bytes) -> str:
    """A strong ETag for bytes that are the same on every replica."""
    return '"' + hashlib.sha256(body).hexdigest()[:32] + '"'


def card_etag(card: pb.AgentCard) -> str:
    """A weak ETag for a card: its content and its signatures' protected headers, not the
    signature bytes. An ECDSA signature differs each time it is made, so two replicas serve
    different bytes for the same signed card; they are equivalent, which is what a weak
    validator says (RFC 9110 §8.8.1), and `If-None-Match` compares weakly."""
    unsigned = MessageToDict(card)
    unsigned.pop("signatures", None)
    basis = json.dumps(unsigned, sort_keys=True, separators=(",", ":")) + "".join(
        signature.protected for signature in card.signatures
    )
    return "W/" + etag(basis.encode())
