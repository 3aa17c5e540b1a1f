"""Bearer token verification, to docs/contract.md#bearer-tokens — every rule written out here.

Why not `jwt.decode` alone: PyJWT picks the algorithm family from the header, accepts a JSON
object with duplicate members (last one wins), treats a string `exp` loosely in some versions,
has no lifetime cap and no `typ` rule. Each of those is a place where two verifiers could
disagree about the same token. So this module parses the compact JWS itself, checks the header
before any key is touched, verifies the signature with `cryptography` using the key chosen by
`kid` from our JWKS only, and then checks every claim explicitly.

Verified tokens are cached, keyed by the token, until `exp`. A cache hit re-checks the time
claims (the clock moved) and that the token's key is still the one published under its `kid`;
a key that left the JWKS (or was replaced) drops the entry, so revocation by key rotation works.

Refusals that no later moment can undo — a bad signature, an expired token — are remembered too,
briefly and boundedly, keyed by a hash of the token: a forged token with a published `kid`, sent
again and again, then costs a lookup instead of a signature check each time. A remembered refusal
holds only while the key chosen for the token is the very key that refused it, so a key rotated
in under that `kid` makes a good token good at once.
"""

from __future__ import annotations

import binascii
import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

from authz.errors import (
    BadSignature,
    InvalidToken,
    KeysUnavailable,
    TokenExpired,
    TokenNotYetValid,
)
from authz.jwks import KeySet, KeyStore, VerificationKey
from authz.settings import TokenRules
from contract.identity import is_identifier
from contract.jose import b64url_decode, json_object_segment

# Header parameters that would let a token choose its own key or demand extensions we do not
# implement (RFC 7515 §4.1). Keys come only from the configured JWKS.
FORBIDDEN_HEADER_PARAMETERS = frozenset({"jwk", "jku", "x5u", "x5c", "crit"})
# RFC 7797 `b64` changes what the signature covers; a verifier that ignores it and one that
# honours it disagree about what was signed, so it is refused whatever its value.
UNSUPPORTED_HEADER_PARAMETERS = frozenset({"b64"})
# RFC 7515 §4.1.9 / RFC 9068 §2.1: media types compare case-insensitively, "application/" optional.
ACCEPTED_TYP = frozenset({"jwt", "at+jwt", "application/jwt", "application/at+jwt"})

_HASHES: Mapping[str, Callable[[], hashes.HashAlgorithm]] = {
    "256": hashes.SHA256,
    "384": hashes.SHA384,
    "512": hashes.SHA512,
}
# The key family each algorithm needs; anything else is refused before verification.
KEY_FAMILIES: Mapping[str, frozenset[str]] = {
    **{f"RS{bits}": frozenset({"RSA"}) for bits in _HASHES},
    **{f"PS{bits}": frozenset({"RSA"}) for bits in _HASHES},
    "ES256": frozenset({"EC-P-256"}),
    "ES384": frozenset({"EC-P-384"}),
    "ES512": frozenset({"EC-P-521"}),
    "EdDSA": frozenset({"Ed25519", "Ed448"}),
}
_EC_COORDINATE_BYTES = {"ES256": 32, "ES384": 48, "ES512": 66}
# Refusals remembered: enough for a burst of distinct forgeries (about 1 MB at most), short
# enough that nothing about a refused token is kept for long.
REFUSALS_SIZE = 4096
REFUSALS_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class _Refusal:
    """A refusal to repeat for the same token while `key` is still the key chosen for it."""

    until: float
    key: VerificationKey
    denial: type[InvalidToken]
    description: str


@dataclass(frozen=True, slots=True)
class VerifiedToken:
    """A token whose signature and claims passed; what later steps and the cache need."""

    claims: Mapping[str, Any]
    key: VerificationKey
    audiences: frozenset[str]
    expires_at: int
    not_before: int | None
    issued_at: int | None


def verify_signature(alg: str, key: VerificationKey, signing_input: bytes, sig: bytes) -> bool:
    """Check a JWS signature; the caller has already matched `key.family` to `alg`."""
    public = key.key
    try:
        if isinstance(public, rsa.RSAPublicKey):
            digest = _HASHES[alg[2:]]()
            scheme: padding.AsymmetricPadding = (
                padding.PKCS1v15()
                if alg.startswith("RS")
                else padding.PSS(mgf=padding.MGF1(digest), salt_length=digest.digest_size)
            )
            public.verify(sig, signing_input, scheme, digest)
        elif isinstance(public, ec.EllipticCurvePublicKey):
            size = _EC_COORDINATE_BYTES[alg]
            if len(sig) != 2 * size:  # JWS uses the fixed-size R||S form, not DER
                return False
            der = encode_dss_signature(
                int.from_bytes(sig[:size], "big"), int.from_bytes(sig[size:], "big")
            )
            public.verify(der, signing_input, ec.ECDSA(_HASHES[alg[2:]]()))
        else:  # Ed25519 / Ed448 (EdDSA): the only other types parse_jwks builds
            public.verify(sig, signing_input)
    except InvalidSignature:
        return False
    return True


class TokenVerifier:
    """Verify bearer tokens against the key store, with a bounded verified-token cache."""

    def __init__(
        self,
        rules: TokenRules,
        keys: KeyStore,
        *,
        cache_size: int,
        on_cache: Callable[[bool], None] = lambda hit: None,
        on_remembered_refusal: Callable[[], None] = lambda: None,
        refusals_size: int = REFUSALS_SIZE,
        refusals_ttl: float = REFUSALS_SECONDS,
    ) -> None:
        self._rules = rules
        self._keys = keys
        self._cache_size = cache_size
        self._cache: dict[str, VerifiedToken] = {}
        self._cache_keys: KeySet = keys.current
        self._on_cache = on_cache
        self._refusals: dict[bytes, _Refusal] = {}
        self._refusals_size = refusals_size
        self._refusals_ttl = refusals_ttl
        self._on_remembered_refusal = on_remembered_refusal

    def cached(self, token: str, audience: str, now: float) -> VerifiedToken | None:
        """`verify` from the cache alone: the verified token for `audience` at `now`, a 401/503
        `Denial`, or None when the token is not cached and must be verified (`verify`). No
        await, so a Check on a cached token can be decided without a task (`Decider`)."""
        if not self._keys.usable():  # also for cache hits: stale keys stop every token
            raise KeysUnavailable("no usable signing keys")
        if self._keys.current is not self._cache_keys:
            self._forget_unpublished()
        cached = self._cache.get(token)
        if cached is None:
            return None
        try:
            self._check_times(cached.expires_at, cached.not_before, cached.issued_at, now)
        except InvalidToken:
            del self._cache[token]
            raise
        self._on_cache(True)
        return _for_audience(cached, audience)

    async def verify(
        self, token: str, audience: str, now: float, *, admit: Callable[[], None] = lambda: None
    ) -> VerifiedToken:
        """Return the verified token for `audience` at `now`, or raise a 401/503 `Denial`.
        `admit` is called just before a signature is checked — never for a cached token or a
        remembered refusal — and may refuse the check (`admission.py`)."""
        verified = self.cached(token, audience, now)
        if verified is not None:
            return verified
        self._on_cache(False)
        verified = await self._verify(token, now, admit)
        self._remember(token, verified)
        return _for_audience(verified, audience)

    def __len__(self) -> int:
        """How many verified tokens are cached."""
        return len(self._cache)

    def _forget_unpublished(self) -> None:
        """The key set changed: drop entries whose key is no longer the one published."""
        current = self._keys.current
        self._cache = {
            token: entry
            for token, entry in self._cache.items()
            if current.get(entry.key.kid) is entry.key
        }
        self._cache_keys = current

    def _remember(self, token: str, verified: VerifiedToken) -> None:
        if self._cache_size <= 0:
            return
        if len(self._cache) >= self._cache_size:
            del self._cache[next(iter(self._cache))]  # oldest first; expired ones age out too
        self._cache[token] = verified

    async def _verify(self, token: str, now: float, admit: Callable[[], None]) -> VerifiedToken:
        header_b64, payload_b64, signature_b64 = token.split(".")
        header = json_object_segment(header_b64)
        if header is None:
            raise InvalidToken("token header is not a JSON object")
        alg = header.get("alg")
        if not isinstance(alg, str) or alg not in self._rules.algorithms:
            raise InvalidToken("token algorithm is not allowed")
        if not FORBIDDEN_HEADER_PARAMETERS.isdisjoint(header):
            raise InvalidToken("token header carries a key reference or critical extension")
        if not UNSUPPORTED_HEADER_PARAMETERS.isdisjoint(header):
            raise InvalidToken("token header carries an unsupported parameter")
        typ = header.get("typ")
        if typ is not None and (not isinstance(typ, str) or typ.lower() not in ACCEPTED_TYP):
            raise InvalidToken("token typ is not accepted")
        kid = header.get("kid")
        if not isinstance(kid, str) or not kid:
            raise InvalidToken("token header has no kid")
        key = await self._keys.key_for(kid)
        if key.family not in KEY_FAMILIES[alg] or (key.alg is not None and key.alg != alg):
            raise InvalidToken("token algorithm does not match its key")
        # The token passed the credential checks: base64url and dots only, so ASCII.
        fingerprint = hashlib.sha256(token.encode("ascii")).digest()
        refusal = self._refusals.get(fingerprint)
        if refusal is not None and refusal.key is key and now < refusal.until:
            self._on_remembered_refusal()
            raise refusal.denial(refusal.description)
        try:
            signature = b64url_decode(signature_b64)
        except (ValueError, binascii.Error):
            raise InvalidToken("token signature is malformed") from None
        admit()  # the signature check is the cost to bound; a refusal here is not remembered
        try:
            return self._check_signed(alg, key, f"{header_b64}.{payload_b64}", signature, now)
        except (BadSignature, TokenExpired) as final:  # no later moment can undo these
            self._remember_refusal(fingerprint, key, final, now)
            raise

    def _check_signed(
        self, alg: str, key: VerificationKey, signing_input: str, signature: bytes, now: float
    ) -> VerifiedToken:
        """The signature over `header.payload`, then the claims."""
        if not verify_signature(alg, key, signing_input.encode("ascii"), signature):
            raise BadSignature("token signature is invalid")
        claims = json_object_segment(signing_input.partition(".")[2])
        if claims is None:
            raise InvalidToken("token payload is not a JSON object")
        return self._check_claims(claims, key, now)

    def _remember_refusal(
        self, fingerprint: bytes, key: VerificationKey, refusal: InvalidToken, now: float
    ) -> None:
        if self._refusals_size <= 0:
            return
        self._refusals.pop(fingerprint, None)
        if len(self._refusals) >= self._refusals_size:
            del self._refusals[next(iter(self._refusals))]  # oldest first: the soonest to lapse
        self._refusals[fingerprint] = _Refusal(
            now + self._refusals_ttl, key, type(refusal), refusal.description
        )

    def _check_claims(
        self, claims: dict[str, Any], key: VerificationKey, now: float
    ) -> VerifiedToken:
        rules = self._rules
        if claims.get("iss") != rules.issuer:
            raise InvalidToken("token issuer is not accepted")
        audiences = _audiences(claims.get("aud"))
        expires_at = _int_claim(claims, "exp")
        if expires_at is None:
            raise InvalidToken("token exp is missing or not an integer")
        not_before = _int_claim(claims, "nbf")
        issued_at = _int_claim(claims, "iat")
        sub = claims.get("sub")
        if not is_identifier(sub):
            raise InvalidToken("token sub is missing, empty or malformed")
        if "jti" in claims and not isinstance(claims["jti"], str):  # RFC 7519 §4.1.7
            raise InvalidToken("token jti is not a string")
        # Without iat, measure the remaining lifetime: a token must never be good for longer.
        start = now if issued_at is None else issued_at
        if expires_at - start > rules.max_lifetime:
            raise InvalidToken("token lifetime exceeds the maximum")
        self._check_times(expires_at, not_before, issued_at, now)
        return VerifiedToken(
            claims=claims,
            key=key,
            audiences=audiences,
            expires_at=expires_at,
            not_before=not_before,
            issued_at=issued_at,
        )

    def _check_times(
        self, expires_at: int, not_before: int | None, issued_at: int | None, now: float
    ) -> None:
        leeway = self._rules.leeway
        if now >= expires_at + leeway:
            raise TokenExpired("token has expired")
        if not_before is not None and now < not_before - leeway:
            raise TokenNotYetValid("token is not valid yet")
        if issued_at is not None and issued_at > now + leeway:
            raise TokenNotYetValid("token is issued in the future")


def _for_audience(verified: VerifiedToken, audience: str) -> VerifiedToken:
    if audience not in verified.audiences:
        raise InvalidToken("token audience is not accepted")
    return verified


def _audiences(aud: Any) -> frozenset[str]:
    if isinstance(aud, str) and aud:
        return frozenset({aud})
    if isinstance(aud, list) and aud and all(isinstance(item, str) for item in aud):
        return frozenset(aud)
    raise InvalidToken("token audience is missing or malformed")


def _int_claim(claims: Mapping[str, Any], name: str) -> int | None:
    """An optional NumericDate as an integer; bool (an int subclass), floats, strings, null and
    anything else present under that name are refused."""
    if name not in claims:
        return None
    value = claims[name]
    if type(value) is not int:
        raise InvalidToken(f"token {name} is missing or not an integer")
    return value
