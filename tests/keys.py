"""Private keys for tests, made fresh at test time, one place for every suite: by the JWS
algorithm they sign with (authz's token issuer, the adapter's card signer)."""

from __future__ import annotations

from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

PrivateKey = ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey | rsa.RSAPrivateKey
# The algorithms a key can be made for, RSA ones at 2048 bits (the smallest anyone accepts).
ALGORITHMS = ("ES256", "ES384", "EdDSA", "PS256", "RS256")


def private_key(alg: str) -> PrivateKey:
    """A new private key that signs with `alg`."""
    if alg in ("RS256", "PS256"):
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    if alg == "ES256":
        return ec.generate_private_key(ec.SECP256R1())
    if alg == "ES384":
        return ec.generate_private_key(ec.SECP384R1())
    if alg == "EdDSA":
        return ed25519.Ed25519PrivateKey.generate()
    raise ValueError(alg)
