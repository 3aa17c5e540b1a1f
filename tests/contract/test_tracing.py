"""The trace-link rule both sides apply: what authz forwards is exactly what the adapter links."""

from __future__ import annotations

import pytest

from contract.tracing import is_trace_link, trace_link

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
FUTURE = "01" + TRACEPARENT[2:]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (TRACEPARENT, TRACEPARENT),
        (TRACEPARENT.upper(), None),
        ("ff" + TRACEPARENT[2:], None),
        ("00-" + "0" * 32 + TRACEPARENT[35:], None),
        (TRACEPARENT[:36] + "0" * 16 + "-01", None),
        (TRACEPARENT + "-extra", None),
        (FUTURE + "-future", FUTURE),
        (TRACEPARENT + "\n", None),
        (None, None),
    ],
)
def test_trace_link_parsing(value: str | None, expected: str | None) -> None:
    """W3C Trace Context: lowercase hex, no zero ids, version ff invalid, future versions cut."""
    assert trace_link(value) == expected


@pytest.mark.parametrize("value", [TRACEPARENT, FUTURE])
def test_a_forwarded_link_is_a_link(value: str) -> None:
    """Whatever authz forwards, the adapter accepts as it is."""
    assert is_trace_link(trace_link(value))


@pytest.mark.parametrize(
    "value",
    [None, "", "garbage", "ff" + TRACEPARENT[2:], FUTURE + "-future", TRACEPARENT + "-extra"],
)
def test_anything_authz_would_not_forward_is_no_link(value: str | None) -> None:
    """A value authz would have dropped or cut is not a link on the adapter side either."""
    assert not is_trace_link(value)
