"""The gRPC answer's bytes, spliced from pieces, are the CheckResponse message's own bytes."""

from __future__ import annotations

import pytest

from authz import responses
from authz.errors import Denial, LoopDetected, MissingCredential, RateLimited

LINK = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7"


@pytest.mark.parametrize("length", [1, 100, 127, 128, 700, 4096, 20000])
@pytest.mark.parametrize("link", [None, LINK])
def test_an_allows_bytes_are_its_messages_bytes(length: int, link: str | None) -> None:
    """Across the lengths where protobuf's varint lengths grow a byte, with and without a link."""
    assertion = ("abc-_." * length)[:length]
    expected = responses.allowed(assertion, link).SerializeToString()
    assert responses.allowed_wire(assertion, link) == expected


@pytest.mark.parametrize(
    "denial",
    [
        MissingCredential("a bearer token is required"),
        RateLimited("rate limit exceeded", retry_after=3, policy="10;w=60"),
        LoopDetected("the request comes from Orrery itself"),
    ],
    ids=lambda denial: type(denial).__name__,
)
def test_a_denials_bytes_are_its_messages_bytes(denial: Denial) -> None:
    """Serialised once per distinct denial, the same bytes as the message."""
    assert responses.denied_wire(denial) == responses.denied(denial).SerializeToString()
