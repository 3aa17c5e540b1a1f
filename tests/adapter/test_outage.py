"""One storage incident is one `store_unavailable` and one `store_recovered` (`adapter/outage.py`):
what ends an incident is an answer the store gave after it began."""

from __future__ import annotations

import logging

import pytest

from adapter.metrics import Metrics
from adapter.outage import Outage


def events(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("store_")]


def test_many_failures_and_one_answer_are_one_incident(caplog: pytest.LogCaptureFixture) -> None:
    """Failures after the first add nothing to the log; the next answer ends the incident."""
    outage = Outage((ConnectionRefusedError,), Metrics())
    with caplog.at_level(logging.INFO):
        for _ in range(3):
            outage.failed(ConnectionRefusedError())
        outage.answered(outage.mark())
        outage.answered(outage.mark())
    assert events(caplog) == ["store_unavailable", "store_recovered"]
    assert not outage.down


def test_an_answer_to_a_call_begun_before_the_incident_does_not_end_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A slow call that got its answer before the store went away, and finishes after the first
    failure, says nothing about the store now (seen under load: one incident logged as eight)."""
    outage = Outage((ConnectionRefusedError,), Metrics())
    begun = outage.mark()
    with caplog.at_level(logging.INFO):
        outage.failed(ConnectionRefusedError())
        outage.answered(begun)
    assert outage.down
    assert events(caplog) == ["store_unavailable"]


def test_an_answer_to_a_call_begun_during_the_incident_ends_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The store answered a call made while it was thought down: it is back."""
    outage = Outage((ConnectionRefusedError,), Metrics())
    with caplog.at_level(logging.INFO):
        outage.failed(ConnectionRefusedError())
        begun = outage.mark()
        outage.answered(begun)
    assert not outage.down
    assert events(caplog) == ["store_unavailable", "store_recovered"]


def test_a_call_begun_before_an_earlier_incident_cannot_end_a_later_one() -> None:
    """Marks count incidents: a call that spanned two incidents ends neither."""
    outage = Outage((ConnectionRefusedError,), Metrics())
    begun = outage.mark()
    outage.failed(ConnectionRefusedError())
    outage.answered(outage.mark())
    outage.failed(ConnectionRefusedError())
    outage.answered(begun)
    assert outage.down
