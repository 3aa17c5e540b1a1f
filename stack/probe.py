"""Health probes for container health checks: `python -m stack.probe grpc|http TARGET`.

The slim Python image has neither `grpc_health_probe` nor `curl`, but it has this package: authz's
check asks its gRPC health service (`grpc.health.v1`, the same port as Check) for SERVING; the
adapter's asks `GET /readyz` for a 200. Each prints one line and exits 0 (healthy) or 1. It is a
module of its own, not an `orrery-a2a` command, so a check every few seconds imports only grpc
and httpx.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stack.probe", description=__doc__)
    parser.add_argument("protocol", choices=("grpc", "http"))
    parser.add_argument("target", help="grpc: HOST:PORT; http: a URL")
    parser.add_argument("--service", default="", help="the gRPC health service name ('')")
    args = parser.parse_args(argv)
    if args.protocol == "grpc":
        healthy, line = grpc_serving(args.target, service=args.service)
    else:
        healthy, line = http_ok(args.target)
    print(line)
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main())
