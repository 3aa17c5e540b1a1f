"""The strict base64url every JOSE segment and key member goes through (`contract.jose`)."""

from __future__ import annotations

import pytest

from contract.jose import b64url_decode, b64url_encode
from tests.base64url import respell


@pytest.mark.parametrize("data", [b"", b"a", b"ab", b"abc", bytes(range(256))], ids=len)
def test_what_the_encoder_writes_decodes_back(data: bytes) -> None:
    """Every canonical spelling round-trips."""
    assert b64url_decode(b64url_encode(data)) == data


@pytest.mark.parametrize(
    "data",
    [b"a", b"ab", b"\xff", b"\xff\xff", bytes(range(100))],
    ids=["a", "ab", "ff", "ffff", "100"],
)
def test_a_second_spelling_of_the_same_bytes_is_refused(data: bytes) -> None:
    """Unused bits set in the last character (RFC 4648 §3.5) are refused, not ignored."""
    with pytest.raises(ValueError, match="not canonical"):
        b64url_decode(respell(b64url_encode(data)))


@pytest.mark.parametrize(
    "text",
    [
        "YWJj=",
        "YWI=",
        "YW+j",
        "YW/j",
        "YW j",
        " YWJj",
        "YWJj\n",
        "YW.j",
        "Y",
        "YWJjZ",
        "YWJj\u0660",
    ],
    ids=["pad", "pad2", "plus", "slash", "space", "lead", "newline", "dot", "one", "five", "digit"],
)
def test_anything_outside_unpadded_base64url_is_refused(text: str) -> None:
    """Padding, the standard alphabet, whitespace and impossible lengths are refused."""
    with pytest.raises(ValueError, match="base64url"):
        b64url_decode(text)
