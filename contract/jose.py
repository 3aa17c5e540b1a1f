"""JOSE building blocks shared by the token verifier, the JWKS parser and the assertion codec.

Two rules live here so they are the same everywhere a JSON object crosses our trust boundary:
base64url is the unpadded RFC 7515 alphabet in its one canonical spelling, and JSON is strict —
a member name that occurs twice is refused (two parsers that keep different duplicates disagree
on what was signed), as are the non-standard constants `NaN` and `Infinity` that Python's `json`
accepts by default.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

_BASE64URL_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
_BASE64URL = re.compile(r"[A-Za-z0-9_-]*")
_BASE64URL_VALUES = {char: value for value, char in enumerate(_BASE64URL_ALPHABET)}
# By length mod 4: the last character carries 4 (…2) or 2 (…3) bits that encode no byte.
_UNUSED_BITS = {2: 0b1111, 3: 0b11}


_TO_URLSAFE = bytes.maketrans(b"+/", b"-_")


def b64url_encode(data: bytes) -> str:
    """Unpadded base64url. What `base64.urlsafe_b64encode` computes, without its Python wrappers:
    authz encodes parts of an assertion on every Check."""
    return binascii.b2a_base64(data, newline=False).translate(_TO_URLSAFE).rstrip(b"=").decode()


def b64url_decode(text: str) -> bytes:
    """Decode unpadded, canonical base64url; raise `ValueError` for anything else.

    Stricter than `base64.urlsafe_b64decode`, which skips characters outside its alphabet and
    takes `+`, `/` and padding: only `A-Z a-z 0-9 - _`, no impossible length, and the unused low
    bits of the last character must be zero (RFC 4648 §3.5). So every byte string has exactly one
    spelling, and a token or assertion has one string form: the key of every cache and list that
    remembers it.
    """
    spare = len(text) % 4
    if spare == 1 or not _BASE64URL.fullmatch(text):
        raise ValueError("not unpadded base64url")
    if spare and _UNUSED_BITS[spare] & _BASE64URL_VALUES[text[-1]]:
        raise ValueError("not canonical base64url")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for name, value in pairs:
        if name in obj:
            raise ValueError("duplicate member")
        obj[name] = value
    return obj


def _no_constants(name: str) -> Any:
    raise ValueError(f"non-standard JSON constant {name}")


def strict_json(data: bytes | str) -> Any:
    """Parse RFC 8259 JSON (UTF-8 only), refusing duplicate member names and NaN/Infinity.

    Raises `ValueError` (which covers bad UTF-8 and bad JSON) when the input is not acceptable.
    """
    text = data.decode("utf-8") if isinstance(data, bytes) else data
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constants)
    except RecursionError:  # "[[[[…" from an unauthenticated header must not become a crash
        raise ValueError("JSON nested too deeply") from None


def json_object_segment(segment: str) -> dict[str, Any] | None:
    """Decode one base64url segment holding a strict JSON object, or return None if it is not."""
    try:
        value = strict_json(b64url_decode(segment))
    except ValueError:  # bad base64 (binascii.Error), bad UTF-8, bad JSON, a duplicate member
        return None
    return value if isinstance(value, dict) else None


# RFC 7638 §3.2: the members of a public JWK that its thumbprint covers, per key type.
_THUMBPRINT_MEMBERS: Mapping[str, tuple[str, ...]] = {
    "EC": ("crv", "kty", "x", "y"),
    "OKP": ("crv", "kty", "x"),
    "RSA": ("e", "kty", "n"),
}


def jwk_thumbprint(jwk: Mapping[str, Any]) -> str:
    """The RFC 7638 SHA-256 thumbprint of a public JWK, base64url: a `kid` that names the key
    itself, so it can never point at a different key than the one it was computed from."""
    members = {name: jwk[name] for name in _THUMBPRINT_MEMBERS[jwk["kty"]]}
    canonical = json.dumps(members, separators=(",", ":"), sort_keys=True).encode()
    return b64url_encode(hashlib.sha256(canonical).digest())
