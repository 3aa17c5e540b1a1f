"""What the edge answers, through the real Envoy, authz and adapter (docs/contract.md).

Every answer — the adapter's, authz's denials and each of Envoy's own refusals — carries the
`x-request-id` that Envoy's access log, authz's decision and the adapter's request events record,
so a caller can quote it. Every refusal Envoy makes itself is the edge's JSON shape
(`{"error", "error_description"}`, `no-store`; docs/contract.md#envoys-answers), including those
it makes before it has routed the request (a bad path, an underscored header name, broken HTTP,
an old HTTP version, oversized headers). A known route asked with the wrong method is 405 with
`Allow`.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import h2.config
import h2.connection
import h2.events
import pytest

from tests.e2e.conftest import RawResponse, SlowEdge, raw_exchange, raw_request
from tests.e2e.edge import Edge, unique

pytestmark = [pytest.mark.envoy, pytest.mark.e2e]

CARD_PATH = "/.well-known/agent-card.json"
LIST_TASKS = b'{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{}}'


def _port(edge: Edge) -> int:
    return int(edge.url.rsplit(":", 1)[1])


def _rpc_headers(token: str | None) -> dict[str, str]:
    headers = {"Content-Type": "application/json", "A2A-Version": "1.0"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return headers


@dataclass(frozen=True)
class Answer:
    status: int
    reason: str | None  # the JSON refusal's `error`; None for the adapter's own answer
    send: Callable[[Edge], Awaitable[RawResponse]]
    logged_by: tuple[str, ...] = ()  # components besides Envoy whose events carry the id


ANSWERS = {
    "the adapter's answer": Answer(
        200,
        None,
        lambda edge: raw_request(
            _port(edge),
            "POST",
            "/a2a",
            _rpc_headers(edge.token(subject=unique("user"))),
            body=LIST_TASKS,
        ),
        ("authz", "adapter"),
    ),
    "an authz denial": Answer(
        401,
        "missing_credential",
        lambda edge: raw_request(_port(edge), "POST", "/a2a", _rpc_headers(None), body=LIST_TASKS),
        ("authz",),
    ),
    "no such route": Answer(404, "not_found", lambda edge: raw_request(_port(edge), "GET", "/x")),
    "the wrong method": Answer(
        405, "method_not_allowed", lambda edge: raw_request(_port(edge), "GET", "/a2a")
    ),
    "a reserved header": Answer(
        400,
        "reserved_header",
        lambda edge: raw_request(_port(edge), "GET", CARD_PATH, {"X-Orrery-Role": "admin"}),
    ),
    "an escaped slash": Answer(
        400, "bad_path", lambda edge: raw_request(_port(edge), "POST", "/a2a/..%2Fapprovals")
    ),
    "an underscored header name": Answer(
        400,
        "bad_header_name",
        lambda edge: raw_request(_port(edge), "GET", CARD_PATH, {"x_forwarded_for": "1.2.3.4"}),
    ),
    "broken HTTP": Answer(
        400, "bad_request", lambda edge: raw_request(_port(edge), "GET", CARD_PATH, {"a b": "1"})
    ),
    "HTTP/1.0": Answer(
        426,
        "upgrade_required",
        lambda edge: raw_exchange(_port(edge), f"GET {CARD_PATH} HTTP/1.0\r\n\r\n".encode()),
    ),
    "too many headers": Answer(
        431,
        "headers_too_large",
        lambda edge: raw_request(
            _port(edge), "GET", CARD_PATH, {f"x-h{n}": "1" for n in range(70)}
        ),
    ),
    "a body over the cap": Answer(
        413,
        "body_too_large",
        lambda edge: raw_request(
            _port(edge),
            "POST",
            "/a2a",
            _rpc_headers(edge.token(subject=unique("user"))),
            body=b" " * (1024 * 1024),
        ),
    ),
}


@pytest.mark.parametrize("answer", ANSWERS.values(), ids=ANSWERS.keys())
async def test_every_answer_carries_the_request_id_its_log_lines_carry(
    edge: Edge, answer: Answer
) -> None:
    """The response's x-request-id is the one in Envoy's access-log line for it, and in
    authz's decision and the adapter's request event when they took part."""
    response = await answer.send(edge)
    assert response.status == answer.status, response.body
    request_id = response.headers["x-request-id"]
    logged = await edge.access(request_id)
    assert logged["status"] == answer.status
    for component in answer.logged_by:
        event = "decision" if component == "authz" else "a2a_request"
        await edge.event(component, event, request_id=request_id)


REFUSALS = {name: answer for name, answer in ANSWERS.items() if answer.reason}


@pytest.mark.parametrize("answer", REFUSALS.values(), ids=REFUSALS.keys())
async def test_every_refusal_is_the_edges_json_shape(edge: Edge, answer: Answer) -> None:
    """{"error": reason, "error_description": text}, application/json, no-store — Envoy's own
    refusals included, however early Envoy made them."""
    response = await answer.send(edge)
    assert response.status == answer.status
    assert response.headers["content-type"] == "application/json"
    assert response.headers["cache-control"] == "no-store"
    body = json.loads(response.body)
    assert set(body) == {"error", "error_description"}
    assert body["error"] == answer.reason
    assert isinstance(body["error_description"], str) and body["error_description"]


WRONG_METHODS = [
    ("GET", "/a2a", "POST"),
    ("PUT", "/a2a", "POST"),
    ("DELETE", "/a2a/", "POST"),
    ("POST", CARD_PATH, "GET"),
    ("DELETE", CARD_PATH, "GET"),
    ("PUT", "/.well-known/jwks.json", "GET"),
]


@pytest.mark.parametrize(("method", "path", "allow"), WRONG_METHODS)
async def test_a_known_route_with_the_wrong_method_is_405_with_allow(
    edge: Edge, method: str, path: str, allow: str
) -> None:
    """405 method_not_allowed naming the method the route takes, not 404; nothing forwarded."""
    before = await edge.envoy_counter("cluster.adapter.upstream_rq_total")
    response = await raw_request(_port(edge), method, path)
    assert response.status == 405
    assert response.headers["allow"] == allow
    assert json.loads(response.body)["error"] == "method_not_allowed"
    assert await edge.envoy_counter("cluster.adapter.upstream_rq_total") == before


async def test_a_request_that_arrives_too_slowly_is_a_json_408(slow_edge: SlowEdge) -> None:
    """A body that stops arriving is cut at the request timeout (2 s on this edge) with 408
    request_timeout, as JSON with a request id."""
    edge = slow_edge.edge
    head = f"POST /a2a HTTP/1.1\r\nHost: edge.test\r\nContent-Length: {len(LIST_TASKS)}\r\n\r\n"
    response = await raw_exchange(_port(edge), head.encode() + LIST_TASKS[:10])
    assert response.status == 408
    assert json.loads(response.body)["error"] == "request_timeout"
    assert response.headers["cache-control"] == "no-store"
    assert (await edge.access(response.headers["x-request-id"]))["status"] == 408


def _h2_exchange(port: int, streams: list[list[tuple[str, str]]]) -> list[list[object]]:
    """Send each header list as its own stream on one HTTP/2 (prior knowledge) connection, one
    after the other; the h2 events of each stream until it ended or was reset."""
    config = h2.config.H2Configuration(client_side=True, validate_outbound_headers=False)
    connection = h2.connection.H2Connection(config)
    results: list[list[object]] = []
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        connection.initiate_connection()
        sock.sendall(connection.data_to_send())
        for number, headers in enumerate(streams):
            stream_id = 1 + 2 * number
            connection.send_headers(stream_id, headers, end_stream=True)
            sock.sendall(connection.data_to_send())
            events: list[object] = []
            while not any(
                isinstance(e, h2.events.StreamEnded | h2.events.StreamReset) for e in events
            ):
                data = sock.recv(65536)
                assert data, "the connection closed"
                events += [e for e in connection.receive_data(data) if getattr(e, "stream_id", 0)]
                sock.sendall(connection.data_to_send())
            results.append(events)
    return results


async def test_an_underscored_header_name_over_http2_resets_only_its_stream(edge: Edge) -> None:
    """HTTP/2 has no answer to shape here: Envoy's codec resets the stream (no status, no body,
    so no request id either) and forwards nothing, and the connection serves the next stream."""
    base = [(":method", "GET"), (":path", CARD_PATH), (":scheme", "http"), (":authority", "x")]
    before = await edge.envoy_counter("cluster.adapter.upstream_rq_total")
    refused, served = await asyncio.to_thread(
        _h2_exchange, _port(edge), [[*base, ("x_forwarded_for", "1.2.3.4")], base]
    )
    assert [type(e) for e in refused] == [h2.events.StreamReset]
    assert await edge.envoy_counter("cluster.adapter.upstream_rq_total") == before + 1
    (head,) = [e for e in served if isinstance(e, h2.events.ResponseReceived)]
    headers = {name.decode(): value.decode() for name, value in head.headers}
    assert headers[":status"] == "200"
    assert headers["x-request-id"]
