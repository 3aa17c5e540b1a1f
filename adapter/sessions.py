"""Conversation binding: the gateway session id is derived, never taken from the client.

The a2a-sdk mints a `contextId` before the executor runs and passes client-sent ones through, so
the server cannot tell a minted id from a guessed one. Instead of storing a binding, the session
id is a hash of (principal key, contextId): any `contextId` a client sends — including one it
learned from someone else — reaches only the caller's own conversation, on every replica, with no
table. The two inputs are JSON-encoded as an array before hashing, so no two distinct pairs give
the same input (a plain concatenation would let `("a", "bc")` collide with `("ab", "c")`).
"""

from __future__ import annotations

import hashlib
import json

PREFIX = "a2a-"


def session_id(principal_key: str, context_id: str) -> str:
    """`a2a-` + hex SHA-256 over the unambiguous encoding of (principal key, contextId)."""
    encoded = json.dumps([principal_key, context_id], ensure_ascii=True, separators=(",", ":"))
    return PREFIX + hashlib.sha256(encoded.encode("ascii")).hexdigest()
