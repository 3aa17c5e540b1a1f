"""Health probes for container health checks: `python -m stack.probe grpc|http TARGET | self`.

The slim Python image has neither `grpc_health_probe` nor `curl`, but it has this package: authz's
check asks its gRPC health service (`grpc.health.v1`, the same port as Check) for SERVING; the
adapter's asks `GET /readyz` for a 200. Each prints one line and exits 0 (healthy) or 1.

A check runs every few seconds in every container, so it imports only what its protocol needs:
a module of its own, not an `orrery-a2a` command; gRPC only for `grpc`; the standard library's
HTTP client for `http` (httpx's import alone cost more than the rest); the stack's addresses only
for `self`. An HTTP check costs 0.06 s of CPU, where importing everything cost 0.33 s.

`self` is the image's own HEALTHCHECK: one image runs authz, the adapter, the Envoy config
renderer and the pod's namespace holder, so it looks at what runs in the container's PID namespace
(`python -m authz` or `python -m adapter`) and probes that component at the address its variable
names (the stack's default otherwise). A container running neither has nothing to probe.
"""

from __future__ import annotations

import argparse
import http.client
import itertools
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from urllib.parse import urlsplit

# The module a container runs (`python -m NAME`) → the variable naming the address `self` probes.
_COMPONENTS = {"authz": "ORRERY_A2A_AUTHZ_ADDR", "adapter": "ORRERY_A2A_ADAPTER_ADDR"}


def grpc_serving(address: str, *, service: str = "", timeout: float = 3.0) -> tuple[bool, str]:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
        except grpc.RpcError as exc:
            return False, f"{address}: {exc.code().name}"
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    return reply.status == health_pb2.HealthCheckResponse.SERVING, f"{address}: {status}"


def http_ok(url: str, *, timeout: float = 3.0) -> tuple[bool, str]:
    """GET `url` (plain HTTP: every probed endpoint is on the pod's loopback); a redirect is not
    followed, so only a 200 from the endpoint itself is healthy."""
    parts = urlsplit(url)
    try:
        port = parts.port or 80
    except ValueError:  # a port that is not a number in range
        port = None
    if parts.scheme != "http" or not parts.hostname or port is None:
        return False, f"{url}: not an http:// URL"
    path = parts.path or "/"
    connection = http.client.HTTPConnection(parts.hostname, port, timeout=timeout)
    try:
        connection.request("GET", f"{path}?{parts.query}" if parts.query else path)
        status = connection.getresponse().status
    except (OSError, http.client.HTTPException) as exc:
        return False, f"{url}: {type(exc).__name__}"
    finally:
        connection.close()
    return status == 200, f"{url}: {status}"


def running_component(proc: Path = Path("/proc")) -> str | None:
    """authz or adapter, if a process in this PID namespace runs it as `python -m NAME`."""
    for cmdline in sorted(proc.glob("[0-9]*/cmdline")):
        try:
            argv = cmdline.read_bytes().decode(errors="replace").split("\0")
        except OSError:  # the process ended while we looked
            continue
        for flag, module in itertools.pairwise(argv):
            if flag == "-m" and module in _COMPONENTS:
                return module
    return None


def self_healthy(env: Mapping[str, str], proc: Path = Path("/proc")) -> tuple[bool, str]:
    """Probe whichever component this container runs; nothing to probe counts as healthy."""
    component = running_component(proc)
    if component is None:
        return True, "nothing to probe: neither authz nor the adapter runs here"
    from runtime.addresses import parse_address
    from stack.addresses import client_host
    from stack.settings import ADDRESSES

    variable = _COMPONENTS[component]
    target = client_host(parse_address(env.get(variable) or ADDRESSES[variable][1]))
    if component == "authz":
        return grpc_serving(target)
    return http_ok(f"http://{target}/readyz")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m stack.probe",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("protocol", choices=("grpc", "http", "self"))
    parser.add_argument("target", nargs="?", help="grpc: HOST:PORT; http: a URL; self: none")
    parser.add_argument("--service", default="", help="the gRPC health service name ('')")
    args = parser.parse_args(argv)
    if (args.target is None) != (args.protocol == "self"):
        parser.error("grpc and http need a TARGET; self takes none")
    if args.protocol == "self":
        healthy, line = self_healthy(os.environ)
    elif args.protocol == "grpc":
        healthy, line = grpc_serving(args.target, service=args.service)
    else:
        healthy, line = http_ok(args.target)
    print(line)
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main())
