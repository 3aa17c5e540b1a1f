"""The a2a-sdk's trace wrappers come off its server classes only while its tracing is off."""

from __future__ import annotations

import os
import subprocess
import sys

# Runs in a fresh interpreter: the SDK decides tracing once, when `a2a.utils.telemetry` is first
# imported, from the environment of that moment.
PROBE = """
import inspect
from adapter import sdk_tracing
unwrapped = sdk_tracing.unwrap()
left = sum(
    1
    for cls in sdk_tracing.TRACED
    for _, method in inspect.getmembers(cls, inspect.isfunction)
    if sdk_tracing._is_trace_wrapper(method)
)
print(unwrapped, left)
"""


def probe(switch: str) -> tuple[int, int]:
    env = {**os.environ, "OTEL_INSTRUMENTATION_A2A_SDK_ENABLED": switch}
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True
    ).stdout
    unwrapped, left = out.split()
    return int(unwrapped), int(left)


def test_tracing_off_leaves_no_trace_wrapper_on_the_request_path() -> None:
    """With the SDK's tracing off, every wrapped method of the traced classes is the SDK's own."""
    unwrapped, left = probe("false")
    assert unwrapped > 0
    assert left == 0


def test_tracing_on_keeps_every_sdk_span() -> None:
    """With the SDK's tracing on, nothing is unwrapped."""
    unwrapped, left = probe("true")
    assert unwrapped == 0
    assert left > 0
