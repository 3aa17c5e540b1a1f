"""Base64url spellings for tests: the same bytes written another way.

Unpadded base64url of n bytes leaves 2 (n % 3 == 2) or 4 (n % 3 == 1) unused low bits in its
last character; a canonical encoder writes them as zero (RFC 4648 §3.5). Setting one gives a
second spelling that a lenient decoder maps to the very same bytes.
"""

from __future__ import annotations

ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


def respell(segment: str) -> str:
    """`segment` (canonical, length not a multiple of 4) with the lowest unused bit set."""
    if len(segment) % 4 not in (2, 3):
        raise ValueError("a segment of whole 3-byte groups has only one spelling")
    last = ALPHABET.index(segment[-1])
    return segment[:-1] + ALPHABET[last | 1]


def with_spare_bits(text: str) -> str:
    """`text` with trailing spaces until its UTF-8 length leaves spare bits when encoded."""
    while len(text.encode()) % 3 == 0:
        text += " "
    return text
