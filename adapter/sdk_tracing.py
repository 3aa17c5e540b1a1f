"""The a2a-sdk's trace wrappers, taken off the request path while the SDK's tracing is off.

The SDK decorates its server classes (request handler, event queues, consumer, queue manager)
with `trace_class`, which replaces every method by a wrapper when the class is defined. With
`OTEL_INSTRUMENTATION_A2A_SDK_ENABLED=false` (what `python -m adapter` sets unless told
otherwise) the wrappers stay and open no-op spans: a no-op tracer, a no-op context manager,
`logger.debug` calls, a status set on nothing — about 8% of a blocking SendMessage's CPU under
load (py-spy, docs/benchmarks.md), for no span anyone can see.

`unwrap()` puts back, on those classes, the functions the SDK wrapped (`__wrapped__`, set by the
wrapper's `functools.wraps`; a method inherited from a traced base is wrapped twice). It does
nothing while the SDK's tracing is on, so an operator who turns it on gets every SDK span as
before. Only wrappers defined in `a2a.utils.telemetry` are removed.
"""

from __future__ import annotations

from typing import Any

from a2a.server.events import event_consumer, event_queue, event_queue_v2, in_memory_queue_manager
from a2a.server.request_handlers import default_request_handler_v2
from a2a.utils import telemetry

# The traced classes a request through this adapter runs (the SDK's JSON-RPC/REST dispatchers and
# the legacy handler are not used here).
TRACED: tuple[type[Any], ...] = (
    default_request_handler_v2.DefaultRequestHandlerV2,
    event_queue.EventQueue,
    event_queue_v2.EventQueueSource,
    event_queue_v2.EventQueueSink,
    event_consumer.EventConsumer,
    in_memory_queue_manager.InMemoryQueueManager,
)


def sdk_tracing_on() -> bool:
    """What the SDK decided when `a2a.utils.telemetry` was imported."""
    return bool(telemetry.otel_installed and telemetry.otel_enabled)


def _is_trace_wrapper(value: Any) -> bool:
    code = getattr(value, "__code__", None)
    return code is not None and code.co_filename == telemetry.__file__


def unwrap() -> int:
    """Remove the SDK's trace wrappers from `TRACED` while its tracing is off; how many methods
    were unwrapped (0 when tracing is on)."""
    if sdk_tracing_on():
        return 0
    count = 0
    for cls in TRACED:
        for name, value in list(vars(cls).items()):
            inner = value
            while _is_trace_wrapper(inner) and hasattr(inner, "__wrapped__"):
                inner = inner.__wrapped__
            if inner is not value:
                setattr(cls, name, inner)
                count += 1
    return count
