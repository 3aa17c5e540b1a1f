"""Health probes for container health checks: `orrery-a2a probe grpc|http …`.

The slim Python image has neither `grpc_health_probe` nor `curl`, but it has this package: authz's
check asks its gRPC health service (`grpc.health.v1`, the same port as Check) for SERVING; the
adapter's asks `GET /readyz` for a 200. Each prints one line and exits 0 (healthy) or 1.
"""

from __future__ import annotations

import grpc
import httpx
from grpc_health.v1 import health_pb2, health_pb2_grpc


def grpc_serving(address: str, *, service: str = "", timeout: float = 3.0) -> tuple[bool, str]:
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
        except grpc.RpcError as exc:
            return False, f"{address}: {exc.code().name}"
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    return reply.status == health_pb2.HealthCheckResponse.SERVING, f"{address}: {status}"


def http_ok(url: str, *, timeout: float = 3.0) -> tuple[bool, str]:
    try:
        response = httpx.get(url, timeout=timeout, follow_redirects=False)
    except httpx.HTTPError as exc:
        return False, f"{url}: {type(exc).__name__}"
    return response.status_code == 200, f"{url}: {response.status_code}"
