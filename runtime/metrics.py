"""What every process's Prometheus registry carries besides its own metrics, one way for all.

* `<namespace>_build_info{version}` — always 1: the release this process runs (a `max` gauge, so
  authz's workers merge into one series).
* the standard `process_*` metrics (CPU seconds, resident memory, open file descriptors, start
  time) of the serving process.
* no `*_created` series: prometheus_client adds one per counter and histogram by default; they
  double the series count and nothing here queries them.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from prometheus_client import CollectorRegistry, Gauge, ProcessCollector, disable_created_metrics

DISTRIBUTION = "orrery-a2a-edge"

# prometheus-client leaves this function unannotated
disable_created_metrics()  # type: ignore[no-untyped-call]


def release() -> str:
    """The installed distribution's version ("unknown" when run from a bare checkout)."""
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return "unknown"


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
    info.labels(release()).set(1)


def describe_process(registry: CollectorRegistry) -> None:
    """Register the standard `process_*` metrics of this process in `registry`."""
    ProcessCollector(registry=registry)
