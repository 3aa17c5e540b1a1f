"""Prometheus metrics, in a registry per app (no process-global state).

* `orrery_a2a_requests_total{method, outcome}` — every request: the JSON-RPC method (or the route:
  `approvals_decide`/`approvals_show`, `unknown`) and its outcome (`ok`, a refusal reason, or a
  JSON-RPC error reason such as `TASK_NOT_FOUND`).
* `orrery_a2a_request_seconds{method}` — handling time (for a stream, until it ends).
* `orrery_a2a_turns_in_flight` — turns holding an in-flight slot in this process.
* `orrery_a2a_subscriptions_open` — `SubscribeToTask` streams open in this process.
* `orrery_a2a_tasks_stored` — tasks in the task store (all owners), read at scrape time.
* `orrery_a2a_approvals_pending` — guarded actions waiting for their human (all subjects,
  unexpired), read at scrape time.
* `orrery_a2a_turns_ended_total{reason}` — turns the adapter ended FAILED because they could not
  finish (`endings.py`: `gateway_failed`, `turn_deadline`, `adapter_stopped`, `turn_lost`).
* `orrery_a2a_store_up` — 0 while the task store is unreachable (an outage, `outage.py`), else 1.
* `orrery_a2a_build_info{version}`, the standard `process_*` metrics, and no `*_created` series
  (`runtime.metrics`).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from runtime.metrics import describe_build, describe_process

NAMESPACE = "orrery_a2a"
CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4
# A blocking answer takes milliseconds to a turn's seconds; a stream lasts until its task ends,
# which Envoy caps at an hour (max_stream_duration): the buckets reach that far.
REQUEST_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
    60,
    300,
    900,
    3600,
)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        describe_build(NAMESPACE, self.registry)
        describe_process(self.registry)
        self.requests = Counter(
            "orrery_a2a_requests",
            "A2A adapter requests by method and outcome.",
            ["method", "outcome"],
            registry=self.registry,
        )
        self.seconds = Histogram(
            "orrery_a2a_request_seconds",
            "Time to answer a request (for a stream, until it ends).",
            ["method"],
            buckets=REQUEST_BUCKETS,
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "orrery_a2a_turns_in_flight",
            "Turns holding an in-flight slot in this process.",
            registry=self.registry,
        )
        self.subscriptions = Gauge(
            "orrery_a2a_subscriptions_open",
            "SubscribeToTask streams open in this process.",
            registry=self.registry,
        )
        self.tasks_stored = Gauge(
            "orrery_a2a_tasks_stored",
            "Tasks in the task store (all owners).",
            registry=self.registry,
        )
        self.approvals_pending = Gauge(
            "orrery_a2a_approvals_pending",
            "Guarded actions waiting for a decision (all subjects, unexpired).",
            registry=self.registry,
        )

        self.turns_ended = Counter(
            "orrery_a2a_turns_ended",
            "Turns ended FAILED because they could not finish, by reason.",
            ["reason"],
            registry=self.registry,
        )
        self.store_up = Gauge(
            "orrery_a2a_store_up",
            "0 while the task store is unreachable, else 1.",
            registry=self.registry,
        )
        self.store_up.set(1)

    def observe(self, method: str, outcome: str, seconds: float) -> None:
        self.requests.labels(method, outcome).inc()
        self.seconds.labels(method).observe(seconds)

    def render(self) -> bytes:
        """The Prometheus text exposition (format 0.0.4, `CONTENT_TYPE`)."""
        return generate_latest(self.registry)
