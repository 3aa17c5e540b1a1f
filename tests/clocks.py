"""A clock a test moves by hand, for the code that takes one (`clock=`): time passes when the test
says so, at once, instead of the test sleeping until it has."""

from __future__ import annotations


class FakeClock:
    """Callable like `time.monotonic`; starts at an arbitrary positive time."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
