"""The edge's logs read as one: Envoy's access log, authz's and the adapter's lines share the
request id and one timestamp format."""

from __future__ import annotations

import asyncio
import json
import re
import time
from typing import Any

import pytest

from tests.e2e.edge import Edge, message_params, unique
from tests.runtime.test_logs import RFC3339_UTC

pytestmark = [pytest.mark.envoy, pytest.mark.e2e]


async def _access_line(edge: Edge, request_id: str) -> dict[str, Any]:
    """Envoy's access-log line for `request_id` (Envoy writes it once the response is done)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for line in edge.log("envoy").read_text(encoding="utf-8").splitlines():
            if line.startswith("{") and f'"{request_id}"' in line:
                return dict(json.loads(line))
        await asyncio.sleep(0.05)
    raise AssertionError(f"envoy logged no access line for {request_id}")


async def test_one_timestamp_format_across_envoy_authz_and_the_adapter(edge: Edge) -> None:
    """A served request's three lines (Envoy access, authz decision, adapter request) carry the
    same request id and an RFC 3339 UTC timestamp with microseconds, in the order they happened."""
    client = unique("logs")
    response = await edge.rpc(
        edge.token("service", client_id=client), "SendMessage", message_params("is search up?")
    )
    assert response.status_code == 200
    decision = await edge.event("authz", "decision", principal=f"service:{client}::{client}")
    served = await edge.event("adapter", "a2a_request", request_id=decision["request_id"])
    access = await _access_line(edge, decision["request_id"])
    stamps = [access["ts"], decision["ts"], served["ts"]]
    assert all(re.fullmatch(RFC3339_UTC, stamp) for stamp in stamps), stamps
    # Envoy stamps the request's start; authz decides, then the adapter answers.
    assert access["ts"] <= decision["ts"] <= served["ts"]
