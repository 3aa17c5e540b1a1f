"""The trace-link rule: which caller traceparent becomes `x-orrery-trace-link`, and which the
adapter accepts from it.

A caller must not graft our spans into a trace it controls, so authz removes `traceparent` and
forwards a valid one as a link target; the adapter links its span to it and starts its own trace.
Both sides apply the one rule below, W3C Trace Context §3.2: version-traceid-parentid-flags in
lowercase hex, never version `ff`, never all-zero ids; a higher version may append fields after
the 55 characters we understand (they are cut off), version `00` may not. The contract:
docs/contract.md#traces.
"""

from __future__ import annotations

import re

_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")
# What nearly every caller sends: version 00 with non-zero ids — valid as it is, by the rule below.
_VALID_00 = re.compile(r"00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}")
LINK_LENGTH = 55


def trace_link(traceparent: str | None) -> str | None:
    """The inbound trace as a link target: a valid traceparent's first 55 characters, else None."""
    if traceparent is None:
        return None
    if _VALID_00.fullmatch(traceparent):  # authz asks on every Check: one match, no groups
        return traceparent
    match = _TRACEPARENT.fullmatch(traceparent)
    if match is None:
        return None
    version, trace_id, parent_id, _flags, rest = match.groups()
    if (
        version == "ff"
        or (version == "00" and rest)
        or trace_id == "0" * 32
        or parent_id == "0" * 16
    ):
        return None
    return traceparent[:LINK_LENGTH]


def is_trace_link(value: str | None) -> bool:
    """True when `value` is exactly what `trace_link` forwards (the adapter's check)."""
    return value is not None and trace_link(value) == value
