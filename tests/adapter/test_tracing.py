"""One server span per request, linked — never parented — to the caller's trace."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from adapter import tracing
from tests.adapter.conftest import Server, delegated, human, running

ALICE_BOT = delegated("bot", "alice")
CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
LINK = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"
SEND = {"message": {"role": "ROLE_USER", "messageId": "m1", "parts": [{"text": "is search up?"}]}}


@dataclass
class Traced:
    server: Server
    exporter: InMemorySpanExporter

    def only_span(self) -> ReadableSpan:
        (span,) = self.exporter.get_finished_spans()
        return span


def recording() -> tuple[TracerProvider, InMemorySpanExporter]:
    """A tracer provider whose finished spans the test can read."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


@pytest.fixture
async def traced() -> AsyncIterator[Traced]:
    provider, exporter = recording()
    async with running(tracer_provider=provider) as server:
        yield Traced(server, exporter)


async def test_a_request_is_one_server_span_named_for_its_method(traced: Traced) -> None:
    """SendMessage: span "A2A SendMessage", kind SERVER, with method, outcome and status."""
    response = await traced.server.rpc(ALICE_BOT, "SendMessage", SEND)
    assert response.status_code == 200
    span = traced.only_span()
    assert (span.name, span.kind) == ("A2A SendMessage", SpanKind.SERVER)
    assert dict(span.attributes or {}) == {
        "orrery.request_id": response.request.headers["x-request-id"],
        "rpc.system": "jsonrpc",
        "rpc.method": "SendMessage",
        "orrery.outcome": "ok",
        "orrery.principal.kind": "delegated",
        "http.response.status_code": 200,
    }


async def test_the_callers_trace_is_a_link_not_the_parent(traced: Traced) -> None:
    """x-orrery-trace-link becomes a span link; the span starts its own trace."""
    await traced.server.rpc(ALICE_BOT, "SendMessage", SEND, headers={"x-orrery-trace-link": LINK})
    span = traced.only_span()
    assert span.parent is None
    assert span.context is not None
    assert format(span.context.trace_id, "032x") != CALLER_TRACE
    (link,) = span.links
    assert format(link.context.trace_id, "032x") == CALLER_TRACE
    assert format(link.context.span_id, "016x") == CALLER_SPAN
    assert link.context.is_remote


async def test_a_traceparent_that_bypassed_authz_is_neither_parent_nor_link(
    traced: Traced,
) -> None:
    """A raw `traceparent` (which Envoy and authz remove) is ignored by the adapter."""
    await traced.server.rpc(ALICE_BOT, "SendMessage", SEND, headers={"traceparent": LINK})
    span = traced.only_span()
    assert span.parent is None
    assert span.context is not None
    assert format(span.context.trace_id, "032x") != CALLER_TRACE
    assert span.links == ()


@pytest.mark.parametrize(
    "value",
    [
        "not-a-traceparent",
        f"00-{'0' * 32}-{CALLER_SPAN}-01",  # all-zero trace id is invalid (W3C §3.2.2.3)
        f"00-{CALLER_TRACE}-{'0' * 16}-01",  # all-zero parent id likewise
        LINK.upper(),
    ],
)
async def test_a_malformed_trace_link_is_dropped(traced: Traced, value: str) -> None:
    """Anything but a valid lowercase W3C traceparent gives no link."""
    await traced.server.rpc(ALICE_BOT, "SendMessage", SEND, headers={"x-orrery-trace-link": value})
    assert traced.only_span().links == ()


async def test_a_refused_request_is_traced_with_its_reason(traced: Traced) -> None:
    """No assertion: the span records the 401 and the reason code, and no principal."""
    response = await traced.server.rpc(None, "SendMessage", SEND)
    assert response.status_code == 401
    attributes = dict(traced.only_span().attributes or {})
    assert attributes["http.response.status_code"] == 401
    assert attributes["orrery.outcome"] == response.json()["error"]
    assert attributes["orrery.principal.kind"] == "none"


async def test_spans_carry_no_identity_or_message_text(traced: Traced) -> None:
    """Neither the principal's names nor the message reach the span."""
    await traced.server.rpc(ALICE_BOT, "SendMessage", SEND)
    text = repr(dict(traced.only_span().attributes or {}))
    assert "alice" not in text and "bot" not in text and "search" not in text


async def test_an_approvals_request_is_a_span_with_its_outcome(traced: Traced) -> None:
    """GET /approvals/{id}: span "approvals show", outcome not_found for an unknown id."""
    async with traced.server.http(human("alice"), "approvals") as http:
        response = await http.get("/approvals/" + "x" * 22)
    assert response.status_code == 404
    span = traced.only_span()
    assert span.name == "approvals show"
    assert (span.attributes or {})["orrery.outcome"] == "not_found"
    assert span.status.status_code != StatusCode.ERROR


async def test_a_stream_is_one_span_that_ends_with_the_stream(traced: Traced) -> None:
    """SendStreamingMessage: one span for the whole stream, named for its method."""
    response = await traced.server.rpc(ALICE_BOT, "SendStreamingMessage", SEND)
    assert response.text.count("data:") >= 2
    span = traced.only_span()
    assert span.name == "A2A SendStreamingMessage"
    assert (span.attributes or {})["orrery.outcome"] == "ok"


async def test_an_exception_is_recorded_by_type_only() -> None:
    """A handler that raises: the span says ERROR and the type, never the exception's text."""
    provider, exporter = recording()

    async def failing(request: web.Request) -> web.StreamResponse:
        raise ValueError("secret-from-the-request")

    handler = tracing.traced(provider.get_tracer("t"), "A2A", failing)
    with pytest.raises(ValueError, match="secret"):
        await handler(make_mocked_request("POST", "/a2a"))
    (span,) = exporter.get_finished_spans()
    assert (span.status.status_code, span.status.description) == (StatusCode.ERROR, "ValueError")
    assert span.events == ()
    assert "secret" not in repr(span.to_json())
