"""The principal assertion: the only thing the adapter trusts about who is calling.

After authz allows a request it sets `x-orrery-principal` to a compact JWS (HS256, `kid` in the
protected header) that names the principal, the surface and Envoy's request id, valid for 30 s.
authz signs with this module and the adapter verifies with it, using the same keys, so the format
has one source of truth.

Why a hand-written JWS and not a JWT library: the format is closed (one algorithm, fixed header,
fixed claims), so every check is explicit here and nothing can be negotiated by the sender — no
`alg` choice, no `none`, no key from the header. The whole codec fits on one screen for review.

Keys come from `ORRERY_A2A_ASSERTION_KEYS` = `kid=base64url-secret,kid2=…`. The first signs; all
verify, so a new key is rolled out to verifiers first (listed second), then promoted to first.
`new_keys_spec` is the one way to make such a value (the local stack, tests and benchmarks).
The contract: docs/contract.md#the-principal-assertion.
"""

from __future__ import annotations

import binascii
import functools
import hashlib
import hmac
import json
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from json.encoder import encode_basestring_ascii
from typing import Any, cast

from contract.errors import AssertionExpired, InvalidAssertion
from contract.identity import (
    AUTONOMY_LEVELS,
    KINDS,
    SURFACE_KINDS,
    Kind,
    Principal,
    Surface,
    principal_key,
)
from contract.jose import b64url_decode, b64url_encode, json_object_segment

ISSUER = "orrery-authz"
AUDIENCE = "orrery-a2a-adapter"
LIFETIME_SECONDS = 30
# The signer and verifier are sidecars on one host; a few seconds covers scheduling, not drift.
CLOCK_LEEWAY_SECONDS = 5
MIN_SECRET_BYTES = 32
MAX_ASSERTION_BYTES = 4096

_KID = re.compile(r"[A-Za-z0-9._-]{1,64}")
_COMPACT = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")
_CLAIMS = frozenset(
    {
        "iss",
        "aud",
        "iat",
        "exp",
        "rid",
        "surface",
        "kind",
        "sub",
        "client",
        "agent",
        "key",
        "role",
        "autonomy",
        "tok_exp",
    }
)


# One encoder instance: `json.dumps` with options builds a new encoder per call (sign is per Check).
_COMPACT_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


@functools.lru_cache(maxsize=16)
def _header_segment(kid: str) -> str:
    return b64url_encode(_COMPACT_JSON.encode({"alg": "HS256", "kid": kid, "typ": "JWT"}).encode())


def _json_object(segment: str) -> dict[str, Any]:
    value = json_object_segment(segment)
    if value is None:
        raise InvalidAssertion("malformed principal assertion")
    return value


@dataclass(frozen=True, slots=True)
class AssertionKeys:
    """Ordered HMAC keys by `kid`; the first one signs, every one verifies."""

    keys: tuple[tuple[str, bytes], ...]

    @classmethod
    def parse(cls, spec: str) -> AssertionKeys:
        """Parse `kid=base64url-secret,…`; the error names the problem and the entry's position,
        never any part of the entry: in an entry without `kid=` (a padded secret pasted alone)
        what stands where the kid would is the secret itself."""
        entries = [item.strip() for item in spec.split(",") if item.strip()]
        if not entries:
            raise ValueError("no keys (expected kid=base64url-secret[,kid2=…])")
        keys: list[tuple[str, bytes]] = []
        for position, entry in enumerate(entries, start=1):
            kid, sep, encoded = entry.partition("=")
            kid = kid.strip()
            if not sep or not _KID.fullmatch(kid):
                raise ValueError(f"entry {position}: expected kid=base64url-secret")
            if any(kid == seen for seen, _ in keys):
                raise ValueError(f"entry {position}: its kid is listed twice")
            encoded = encoded.strip().rstrip("=")
            if not re.fullmatch(r"[A-Za-z0-9_-]+", encoded):
                raise ValueError(f"entry {position}: secret is not base64url")
            try:
                secret = b64url_decode(encoded)
            except (binascii.Error, ValueError):
                raise ValueError(f"entry {position}: secret is not base64url") from None
            if len(secret) < MIN_SECRET_BYTES:
                raise ValueError(
                    f"entry {position}: secret must be at least {MIN_SECRET_BYTES} bytes"
                )
            keys.append((kid, secret))
        return cls(tuple(keys))

    @property
    def signing_kid(self) -> str:
        return self.keys[0][0]

    def secret(self, kid: str) -> bytes | None:
        # A kid is public, so a plain comparison is fine; it also copes with any str the sender
        # put there (hmac.compare_digest raises TypeError on non-ASCII str).
        for known, secret in self.keys:
            if known == kid:
                return secret
        return None

    def __repr__(self) -> str:  # never print secrets, even in a debugger or a traceback
        return f"AssertionKeys(kids={[kid for kid, _ in self.keys]!r})"


def new_keys_spec(*kids: str) -> str:
    """A fresh `ORRERY_A2A_ASSERTION_KEYS` value: a random secret for each kid, the first signs."""
    if not kids:
        raise ValueError("at least one kid is needed")
    return ",".join(f"{kid}={b64url_encode(secrets.token_bytes(MIN_SECRET_BYTES))}" for kid in kids)


@dataclass(frozen=True, slots=True)
class Assertion:
    """A verified assertion: who is calling, on which surface, for which request."""

    principal: Principal
    surface: Surface
    request_id: str
    issued_at: int
    expires_at: int
    token_expires_at: int


def sign(
    keys: AssertionKeys,
    principal: Principal,
    *,
    surface: Surface,
    request_id: str,
    token_expires_at: int,
    now: int,
) -> str:
    """Mint the header value for one allowed request."""
    return Signer(keys, principal, surface=surface, token_expires_at=token_expires_at).sign(
        request_id, now
    )


class Signer:
    """One caller's assertions, with everything but the request's own claims done once.

    authz signs an assertion on every allowed Check, for the same few callers over and over. All
    but three claims (`iat`, `exp`, `rid`) are fixed by the caller and its token, so the payload
    puts those three last (JSON member order carries no meaning; `verify` reads members by name)
    and this object keeps, per caller: the protected header and the fixed claims already
    base64url-encoded — up to the last whole 3-byte group, so what follows encodes on its own —
    and an HMAC already fed that much of the signing input. A Check then encodes and hashes only
    about a hundred bytes instead of the whole assertion. The same bytes as encoding and signing
    the whole payload at once: base64 of a concatenation split at a multiple of 3 bytes is the
    concatenation of the parts' base64.
    """

    __slots__ = ("_carry", "_mac", "_signed_prefix")

    def __init__(
        self, keys: AssertionKeys, principal: Principal, *, surface: Surface, token_expires_at: int
    ) -> None:
        kid, secret = keys.keys[0]
        fixed = (
            f'{{"iss":"{ISSUER}","aud":"{AUDIENCE}","tok_exp":{token_expires_at:d},'
            f'{_identity_claims(principal, surface)},"iat":'
        ).encode()
        whole = len(fixed) - len(fixed) % 3
        self._signed_prefix = _header_segment(kid) + "." + b64url_encode(fixed[:whole])
        self._carry = fixed[whole:]
        self._mac = _keyed_mac(secret).copy()
        self._mac.update(self._signed_prefix.encode("ascii"))

    def sign(self, request_id: str, now: int) -> str:
        """The assertion for request `request_id` issued at `now`. Integers are formatted with
        :d (anything else raises); the request id goes through the C escaping function
        `json.dumps` would call for a str (the same bytes)."""
        rest = (
            f'{now:d},"exp":{now + LIFETIME_SECONDS:d},'
            f'"rid":{encode_basestring_ascii(request_id)}}}'
        )
        tail = b64url_encode(self._carry + rest.encode())
        mac = self._mac.copy()
        mac.update(tail.encode("ascii"))
        return self._signed_prefix + tail + "." + b64url_encode(mac.digest())


def _identity_claims(principal: Principal, surface: Surface) -> str:
    """The claims fixed by who is calling, as JSON object members."""
    identity = {
        "surface": surface,
        "kind": principal.kind,
        "sub": principal.subject,
        "client": principal.client,
        "agent": principal.agent,
        "key": principal.key,
        "role": principal.role,
        "autonomy": principal.autonomy,
    }
    return _COMPACT_JSON.encode(identity)[1:-1]


@functools.lru_cache(maxsize=16)
def _keyed_mac(secret: bytes) -> hmac.HMAC:
    """HMAC-SHA256 already keyed with `secret`, to copy: with OpenSSL 3, keying a new HMAC costs
    more than hashing a whole assertion."""
    return hmac.new(secret, digestmod=hashlib.sha256)


def _require_str(claims: Mapping[str, Any], name: str, *, allow_empty: bool = True) -> str:
    value = claims.get(name)
    if not isinstance(value, str) or (not allow_empty and not value):
        raise InvalidAssertion(f"assertion claim {name} is missing or malformed")
    return value


def _require_int(claims: Mapping[str, Any], name: str) -> int:
    value = claims.get(name)
    if type(value) is not int:  # bool is an int subclass; refuse it and floats alike
        raise InvalidAssertion(f"assertion claim {name} is missing or malformed")
    return value


def verify(
    keys: AssertionKeys,
    value: str | None,
    *,
    request_id: str | None,
    surface: Surface,
    now: int,
) -> Assertion:
    """Verify a header value for *this* request on *this* surface, or raise `InvalidAssertion`.

    Checked, in order: shape and size, header (`alg` HS256 only, a known `kid`, nothing else),
    signature (constant time), then every claim — issuer, audience, times, request id, surface,
    kind allowed on the surface, and a `key` recomputed from the claims.
    """
    if not value:
        raise InvalidAssertion("no principal assertion")
    if len(value) > MAX_ASSERTION_BYTES or not _COMPACT.fullmatch(value):
        raise InvalidAssertion("malformed principal assertion")
    header_b64, payload_b64, signature_b64 = value.split(".")
    header = _json_object(header_b64)
    kid = header.get("kid")
    if (
        header.get("alg") != "HS256"
        or not isinstance(kid, str)
        or not set(header) <= {"alg", "kid", "typ"}
        or header.get("typ", "JWT") != "JWT"
    ):
        raise InvalidAssertion("unacceptable principal assertion header")
    secret = keys.secret(kid)
    if secret is None:
        raise InvalidAssertion("principal assertion signed with an unknown key")
    mac = _keyed_mac(secret).copy()
    mac.update(f"{header_b64}.{payload_b64}".encode("ascii"))
    expected = mac.digest()
    try:
        signature = b64url_decode(signature_b64)
    except (binascii.Error, ValueError):
        raise InvalidAssertion("malformed principal assertion") from None
    if not hmac.compare_digest(expected, signature):
        raise InvalidAssertion("bad principal assertion signature")
    claims = _json_object(payload_b64)
    return _check_claims(claims, request_id=request_id, surface=surface, now=now)


def _check_claims(
    claims: Mapping[str, Any], *, request_id: str | None, surface: Surface, now: int
) -> Assertion:
    if set(claims) != _CLAIMS:
        raise InvalidAssertion("principal assertion claims are incomplete or unexpected")
    if claims["iss"] != ISSUER or claims["aud"] != AUDIENCE:
        raise InvalidAssertion("principal assertion is not for this adapter")
    issued_at = _require_int(claims, "iat")
    expires_at = _require_int(claims, "exp")
    if not 0 < expires_at - issued_at <= LIFETIME_SECONDS:
        raise InvalidAssertion("principal assertion lifetime is out of bounds")
    if issued_at > now + CLOCK_LEEWAY_SECONDS:
        raise InvalidAssertion("principal assertion is issued in the future")
    if now >= expires_at + CLOCK_LEEWAY_SECONDS:
        raise AssertionExpired("principal assertion has expired")
    rid = _require_str(claims, "rid", allow_empty=False)
    if not request_id or rid != request_id:
        raise InvalidAssertion("principal assertion is for another request")
    if claims["surface"] != surface:
        raise InvalidAssertion("principal assertion is for another surface")
    kind = _require_str(claims, "kind")
    if kind not in KINDS or kind not in SURFACE_KINDS[surface]:
        raise InvalidAssertion("principal kind is not allowed on this surface")
    autonomy = _require_str(claims, "autonomy")
    if autonomy not in AUTONOMY_LEVELS:
        raise InvalidAssertion("assertion claim autonomy is missing or malformed")
    subject = _require_str(claims, "sub", allow_empty=False)
    client = _require_str(claims, "client")
    agent = _require_str(claims, "agent")
    if (kind == "delegated") != bool(agent):
        raise InvalidAssertion("assertion claim agent does not match the principal kind")
    principal = Principal(
        kind=cast(Kind, kind),
        subject=subject,
        client=client,
        agent=agent,
        role=_require_str(claims, "role"),
        autonomy=autonomy,
    )
    key = _require_str(claims, "key")
    if not hmac.compare_digest(key.encode(), principal_key(kind, client, agent, subject).encode()):
        raise InvalidAssertion("principal assertion key does not match its claims")
    return Assertion(
        principal=principal,
        surface=surface,
        request_id=rid,
        issued_at=issued_at,
        expires_at=expires_at,
        token_expires_at=_require_int(claims, "tok_exp"),
    )
