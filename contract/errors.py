"""The contract's own errors: why a principal assertion was refused.

They are not part of either service's error tree. The adapter maps them to its 401 refusal and
keeps the stable `reason` code, which then appears in its response body, log event and metrics.
A description is one of the codec's literals: it never echoes the header or a claim value.
The codes: docs/contract.md#adapter-http-refusals.
"""

from __future__ import annotations

from typing import ClassVar


class InvalidAssertion(Exception):
    """The `x-orrery-principal` assertion is absent, forged, stale or not for this request."""

    reason: ClassVar[str] = "assertion_invalid"

    def __init__(self, description: str) -> None:
        super().__init__(description)
        self.description = description


class AssertionExpired(InvalidAssertion):
    """A well-formed assertion whose lifetime (plus the clock leeway) is over."""

    reason = "assertion_expired"
