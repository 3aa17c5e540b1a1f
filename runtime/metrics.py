"""What every process's Prometheus registry carries besides its own metrics, one way for all.

* `<namespace>_build_info{version}` — always 1: the release this process runs (a `max` gauge, so
  authz's workers merge into one series).
* the standard `process_*` metrics (CPU seconds, resident memory, open file descriptors, start
  time) of the serving process.
* no `*_created` series: prometheus_client adds one per counter and histogram by default; they
  double the series count and nothing here queries them.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge, ProcessCollector, disable_created_metrics

from runtime.version import version

# prometheus-client leaves this function unannotated
disable_created_metrics()  # type: ignore[no-untyped-call]


def describe_build(namespace: str, registry: CollectorRegistry) -> None:
    """Register `<namespace>_build_info{version}` = 1 in `registry`."""
    info = Gauge(
        "build_info",
        "Always 1; the release of this process.",
        ["version"],
        namespace=namespace,
        multiprocess_mode="max",
        registry=registry,
    )
    info.labels(version()).set(1)


def describe_process(registry: CollectorRegistry) -> None:
    """Register the standard `process_*` metrics of this process in `registry`."""
    ProcessCollector(registry=registry)
