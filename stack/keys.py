"""Keys the local stack generates for each run: the dev issuer's ES256 key and assertion keys.

Nothing here is reused between runs: a fresh `up` makes fresh keys, so a token minted for an old
stack is refused by the new one, and a leaked dev key dies with its stack.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from jwt.algorithms import ECAlgorithm

from contract.assertion import new_keys_spec
from contract.jose import jwk_thumbprint

ALGORITHM = "ES256"


def new_signing_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def private_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def load_signing_key(path: Path) -> ec.EllipticCurvePrivateKey:
    key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.curve.name != "secp256r1":
        raise ValueError(f"{path} is not a P-256 private key")
    return key


def public_jwk(key: ec.EllipticCurvePrivateKey) -> dict[str, Any]:
    """The public JWK, `kid` = its RFC 7638 thumbprint (stable for the key, unique per run)."""
    jwk: dict[str, Any] = ECAlgorithm.to_jwk(key.public_key(), as_dict=True)
    required = {name: jwk[name] for name in ("crv", "kty", "x", "y")}
    return {**required, "kid": jwk_thumbprint(required), "use": "sig", "alg": ALGORITHM}


def new_assertion_keys() -> str:
    """`ORRERY_A2A_ASSERTION_KEYS` for one run: `kid=base64url-secret` with a random kid."""
    return new_keys_spec(f"dev-{secrets.token_hex(4)}")
