"""Outbound call metrics, in the registry the adapter serves on `/metrics`.

* `orrery_a2a_remote_calls_total{agent, outcome}` — remote calls by allowlisted agent name (`-`
  for a name not on the allowlist, so a caller cannot grow the label set) and outcome (`ok` or a
  reason code of `errors.py`).
* `orrery_a2a_remote_call_seconds{agent}` — how long a call took, whatever its outcome.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

UNLISTED = "-"
BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class RemoteMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.calls = Counter(
            "orrery_a2a_remote_calls",
            "Calls to remote A2A agents by agent and outcome.",
            ["agent", "outcome"],
            registry=registry,
        )
        self.seconds = Histogram(
            "orrery_a2a_remote_call_seconds",
            "Time a call to a remote A2A agent took, by agent.",
            ["agent"],
            buckets=BUCKETS,
            registry=registry,
        )

    def observe(self, agent: str, outcome: str, seconds: float) -> None:
        self.calls.labels(agent, outcome).inc()
        self.seconds.labels(agent).observe(seconds)
