"""Who is calling: the principal, its unambiguous key, and the words of the contract.

A principal is the *whole* identity of a caller: its kind, the OAuth client it uses, the agent
acting (for a delegated call) and the subject (the delegating user, or the client itself for a
service). Everything that scopes data — task ownership, conversation ids, in-flight caps — keys on
`Principal.key`, so two agents delegated by one user never share a task, while they do share the
subject's rate limit. authz derives principals from tokens (`authz.principal`); the adapter only
ever receives them, signed (`contract.assertion`). The contract: docs/contract.md#principals.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, TypeGuard
from urllib.parse import quote

Kind = Literal["delegated", "service", "human"]
Autonomy = Literal["L1", "L2", "L3"]
Surface = Literal["a2a", "approvals"]

KINDS: frozenset[str] = frozenset({"delegated", "service", "human"})
AUTONOMY_LEVELS: tuple[Autonomy, ...] = ("L1", "L2", "L3")
# Machines (delegated agents, services) use A2A; only the human who delegated decides approvals.
SURFACE_KINDS: Mapping[Surface, frozenset[str]] = {
    "a2a": frozenset({"delegated", "service"}),
    "approvals": frozenset({"human"}),
}


# Which roles a token may carry, and the autonomy each gives (ORRERY_A2A_ROLE_AUTONOMY). authz
# enforces it (no recognised role: 403 insufficient_scope); the adapter's card advertises it.
DEFAULT_ROLE_AUTONOMY = "viewer=L1,operator=L2,admin=L3"
_ROLE = re.compile(r"[A-Za-z0-9._:-]{1,64}")
_LEVELS: Mapping[str, Autonomy] = {level: level for level in AUTONOMY_LEVELS}


def parse_role_autonomy(text: str) -> tuple[tuple[str, Autonomy], ...]:
    """`viewer=L1,operator=L2,admin=L3` → ordered (role, level) pairs."""
    pairs: list[tuple[str, Autonomy]] = []
    for entry in (item.strip() for item in text.split(",")):
        role, sep, level = (part.strip() for part in entry.partition("="))
        autonomy = _LEVELS.get(level)
        if not sep or not _ROLE.fullmatch(role) or autonomy is None:
            raise ValueError(f"expected role=L1|L2|L3[,…], got {entry!r}")
        if any(role == seen for seen, _ in pairs):
            raise ValueError(f"role {role!r} is listed twice")
        pairs.append((role, autonomy))
    return tuple(pairs)


# Refused anywhere in an identifier, by Unicode general category: controls (Cc: NUL cannot even
# be stored in PostgreSQL text, where the adapter keeps task owners and approval subjects), format
# characters (Cf: zero-width characters, bidi overrides, the BOM, the soft hyphen — invisible, so
# two identities would look alike in a log or on an approval), surrogates (Cs: a lone one is valid
# JSON, `"\ud800"`, but cannot be encoded as UTF-8 for the assertion, the keys or the log) and
# line and paragraph separators (Zl, Zp: line breaks to a log reader).
_REFUSED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
# The unassigned (Cn) code points of these blocks are default-ignorable (Unicode §5.21): a reader
# that knows them — a later Unicode version — shows nothing, exactly like a format character, and
# one that does not is told to show nothing. Unicode's stability policy fixes the property for
# them; the assigned code points of these blocks are Cf (refused anyway) or variation selectors.
_IGNORABLE_BLOCKS = re.compile(r"[\u2065\ufff0-\ufff8\U000e0000-\U000e0fff]")
# The most UTF-8 bytes one identity claim may have: a real `sub` (an opaque id, an e-mail address
# of at most 254 bytes) fits. Several claims this size in the worst JSON escaping and
# percent-encoding may still not fit one 4096-byte assertion together, so authz measures the
# whole as well (docs/contract.md#identifiers: either way the token is invalid).
MAX_IDENTIFIER_BYTES = 256
# An identifier made only of these names nobody: whitespace of any script (`\s` is Unicode
# whitespace) and the default-ignorable fillers that are not Cf (combining grapheme joiner,
# Hangul fillers, Khmer inherent vowels, Mongolian variation selectors, variation selectors) plus
# the blank braille pattern.
_BLANK = re.compile(
    r"[\s\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180f\u2800\u3164\ufe00-\ufe0f\uffa0"
    r"\U000e0100-\U000e01ef]+"
)


def is_identifier(value: object) -> TypeGuard[str]:
    """What an identity claim must be: a string of at most `MAX_IDENTIFIER_BYTES` UTF-8 bytes
    with something visible in it and no control, format or surrogate character, no unassigned
    default-ignorable code point, nor a line or paragraph separator.

    `str.isprintable` answers in C for the usual identifier (it is false for every refused
    category, and also for other spaces, private-use and unassigned code points, of which only
    the default-ignorable ones are refused: only those strings take the per-character look-up).
    """
    if not isinstance(value, str) or not value or _BLANK.fullmatch(value):
        return False
    if len(value) * 4 > MAX_IDENTIFIER_BYTES and (
        len(value.encode("utf-8", "surrogatepass")) > MAX_IDENTIFIER_BYTES
    ):
        return False
    return value.isprintable() or not any(
        unicodedata.category(char) in _REFUSED_CATEGORIES or _unassigned_ignorable(char)
        for char in value
    )


def is_invisible(char: str) -> bool:
    """A format character (Cf) or an unassigned default-ignorable code point: shown as nothing.
    The identifier rule above and the adapter's message rules refuse the same set."""
    return unicodedata.category(char) == "Cf" or _unassigned_ignorable(char)


def _unassigned_ignorable(char: str) -> bool:
    return _IGNORABLE_BLOCKS.match(char) is not None and unicodedata.category(char) == "Cn"


@functools.lru_cache(maxsize=4096)  # hot on both sides (every Check, every adapter request)
def principal_key(kind: str, client: str, agent: str, subject: str) -> str:
    """Join the four identity components so that no two distinct tuples give one key.

    A plain `kind:client:agent:subject` join is ambiguous (client `cx:` + subject `y` vs client
    `cx` + subject `:y`). Percent-encoding every byte outside RFC 3986 unreserved — `:` and `%`
    included — makes `:` occur only as the separator, so the join is injective.
    """
    return ":".join(quote(part, safe="") for part in (kind, client, agent, subject))


@dataclass(frozen=True, slots=True)
class Principal:
    """A verified caller. `agent` is the acting agent (`act.sub`) or "" when none."""

    kind: Kind
    subject: str
    client: str
    agent: str
    role: str
    autonomy: Autonomy

    @property
    def key(self) -> str:
        return principal_key(self.kind, self.client, self.agent, self.subject)
