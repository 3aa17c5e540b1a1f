"""One OpenTelemetry server span per A2A or approvals request, *linked* to the caller's trace.

authz moves the caller's `traceparent` to `x-orrery-trace-link` and removes `traceparent` and
`tracestate` (docs/contract.md#traces): a caller must not graft our spans into a trace it controls —
choose our trace ids, claim our spans as its children, or force our sampling. So nothing the caller
sent ever becomes the parent of a span here; when the link header holds a valid W3C traceparent,
the span carries a *link* to it, which trace UIs show as "follows from" the caller's span.

Only the OpenTelemetry API is used. With no SDK configured (the default) spans are no-ops that
cost a few microseconds; to export them, run the adapter under an SDK (for instance
`opentelemetry-instrument python -m adapter` with the usual `OTEL_*` variables), or pass a tracer
provider to `make_app`.

Attributes: `rpc.system` ("jsonrpc" on `/a2a`), `rpc.method`, `orrery.outcome` (the reason code
of the request's log event), `http.response.status_code`, `orrery.request_id` (joins the span to
the logs), `orrery.principal.kind`. Never the principal's identity, message text, or any other
header: traces often reach a wider audience than logs. An exception is recorded by type only.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web
from opentelemetry import trace
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.util.types import AttributeValue

from contract.headers import REQUEST_ID_HEADER, TRACE_LINK_HEADER
from contract.tracing import is_trace_link

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def trace_link(request: web.Request) -> str | None:
    """The caller's W3C traceparent that authz moved to `x-orrery-trace-link`, when it is one
    authz could have forwarded (`contract.tracing`); anything else is no link."""
    value = request.headers.get(TRACE_LINK_HEADER)
    return value if is_trace_link(value) else None


def _links(traceparent: str | None) -> list[Link]:
    if traceparent is None:
        return []
    _, trace_id, span_id, flags = traceparent.split("-")
    caller = SpanContext(
        int(trace_id, 16), int(span_id, 16), is_remote=True, trace_flags=TraceFlags(int(flags, 16))
    )
    return [Link(caller)]


def traced(tracer: trace.Tracer, name: str, handler: Handler) -> Handler:
    """`handler` inside a server span called `name` (refined later by `annotate`)."""

    async def handle(request: web.Request) -> web.StreamResponse:
        with tracer.start_as_current_span(
            name,
            kind=SpanKind.SERVER,
            links=_links(trace_link(request)),
            attributes={"orrery.request_id": request.headers.get(REQUEST_ID_HEADER, "")},
            record_exception=False,  # an exception's text may carry request data
            set_status_on_exception=False,
        ) as span:
            try:
                response = await handler(request)
            except BaseException as exc:  # incl. CancelledError: the client went away
                span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
                raise
            span.set_attribute("http.response.status_code", response.status)
            return response

    return handle


def annotate(name: str, attributes: dict[str, AttributeValue]) -> None:
    """Name the current request's span after what it turned out to be, and add attributes
    (a no-op outside a span, or when no SDK records spans)."""
    span = trace.get_current_span()
    span.update_name(name)
    span.set_attributes(attributes)
