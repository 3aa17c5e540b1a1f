"""The request, checked before any cryptography: reserved names, the hop, the query, the bearer.

These are the cheapest refusals (docs/contract.md#authzs-denials), so they run first:

1. a client may not send anything in our `x-orrery-` namespace except the hop header — those
   names carry what authz asserts (`x-orrery-principal`, `x-orrery-trace-link`), and a client
   copy must never be mistaken for ours → 400 `reserved_header`;
2. the hop header marks a call made by Orrery itself; accepting it would let two agents loop at
   the platform's model cost → 508 `loop_detected`;
3. no `access_token` in the query, however spelled (RFC 6750 §2: one method only; §2.3's query
   method puts tokens in logs) → 400 `invalid_request`. Our Envoy refuses it first, on every
   route; this catches it behind any other proxy. The same rule as Envoy's hygiene filter, with
   one shared test table (tests/query_credentials.py);
4. exactly one `Authorization: Bearer <compact JWS>` → else 401 `missing_credential` (no header,
   another scheme, two headers) or `token_invalid` (a bearer value that cannot be a JWS).

Envoy lowercases header names and joins a repeated header's values with "," (and never sends a
comma inside a token, which is base64url), so a comma in `authorization` means two headers.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from urllib.parse import unquote_to_bytes

from authz.errors import (
    BadRequest,
    InvalidRequest,
    InvalidToken,
    LoopDetected,
    MissingCredential,
    ReservedHeader,
)
from contract.headers import HOP_HEADER, REQUEST_ID_HEADER, RESERVED_PREFIX

MAX_TOKEN_BYTES = 8192

_COMPACT_JWS = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")
# Envoy generates UUIDs; anything printable and short is accepted, nothing that could smuggle
# structure into a log line or the assertion.
_REQUEST_ID = re.compile(r"[\x21-\x7e]{1,128}")
_QUERY_START = re.compile(rb"[?#]")
_QUERY_PARTS = re.compile(rb"[&;?#]")
_BLANKS = b" \t\n\r\x0b\x0c"


def check_reserved(headers: Mapping[str, str]) -> None:
    """Refuse client-sent reserved headers (400), then the hop header (508)."""
    for name in headers:
        if name.startswith(RESERVED_PREFIX) and name != HOP_HEADER:
            raise ReservedHeader("x-orrery- headers are reserved")
    if HOP_HEADER in headers:
        raise LoopDetected("the request comes from Orrery itself")


def request_id(headers: Mapping[str, str]) -> str:
    """Envoy's `x-request-id`, which the assertion is bound to; without it nothing is signed."""
    value = headers.get(REQUEST_ID_HEADER, "")
    if not _REQUEST_ID.fullmatch(value):
        raise BadRequest("the request has no usable x-request-id")
    return value


def check_query(path: str) -> None:
    """Refuse an `access_token` parameter as any parser could read one: what follows the first
    `?` or `#`, percent-decoded once, split at `&`, `;`, `?` and `#`, each name (up to `=`)
    without surrounding blanks, in any ASCII case."""
    if "?" not in path and "#" not in path:  # most paths: nothing to encode or search
        return
    start = _QUERY_START.search(path.encode("utf-8", "surrogateescape"))
    if start is None:
        return
    query = unquote_to_bytes(start.string[start.end() :])
    for part in _QUERY_PARTS.split(query):
        if part.partition(b"=")[0].strip(_BLANKS).lower() == b"access_token":
            raise InvalidRequest("an access token is accepted only in the Authorization header")


def bearer_token(headers: Mapping[str, str]) -> str:
    """The one bearer token of the request (RFC 6750 §2.1), not yet verified."""
    return _bearer(headers.get("authorization", ""))


@functools.lru_cache(maxsize=1024)
def _bearer(value: str) -> str:
    """`bearer_token` of one header value. Remembered (a refusal is raised again, never
    remembered): a caller sends the same header on every request, and matching a token of a
    few hundred characters against the JWS pattern costs more than the rest of these checks."""
    if not value:
        raise MissingCredential("a bearer token is required")
    if "," in value:
        raise MissingCredential("more than one Authorization header")
    scheme, _, token = value.partition(" ")
    if scheme.lower() != "bearer":
        raise MissingCredential("the Authorization scheme must be Bearer")
    token = token.lstrip(" ")
    if not token:
        raise MissingCredential("a bearer token is required")
    if len(token) > MAX_TOKEN_BYTES:
        raise InvalidToken("token is too large")
    if not _COMPACT_JWS.fullmatch(token):
        raise InvalidToken("token is not a compact JWS")
    return token
