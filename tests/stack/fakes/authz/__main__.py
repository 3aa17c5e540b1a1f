"""Stand-in for `python -m authz`: the process contract plus a minimal, honest Check.

Verifies the bearer token (ES256, the configured issuer, the surface's audience) against the JWKS
at ORRERY_A2A_JWKS_URL, derives a principal the way CONTRACTS.md describes (simplified), and
answers OK with the real signed assertion, or 401. Test knobs: FAKE_AUTHZ_FAIL=1 exits 2 like a bad
configuration; FAKE_AUTHZ_DIE_WHEN=<path> dies with code 3 once that file exists.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
import time
import urllib.request
from typing import Any

import grpc
import jwt
from envoy.config.core.v3 import base_pb2
from envoy.service.auth.v3 import external_auth_pb2 as pb
from envoy.service.auth.v3 import external_auth_pb2_grpc as pb_grpc
from envoy.type.v3 import http_status_pb2
from google.protobuf import wrappers_pb2
from google.rpc import status_pb2

from authz import assertion, logs
from authz.principal import Principal

log = logging.getLogger("fake.authz")
AUTONOMY = {"viewer": "L1", "operator": "L2", "admin": "L3"}


def _header(name: str, value: str) -> base_pb2.HeaderValueOption:
    return base_pb2.HeaderValueOption(
        header=base_pb2.HeaderValue(key=name, value=value),
        append=wrappers_pb2.BoolValue(value=False),
        append_action=base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD,
    )


def _deny(reason: str) -> pb.CheckResponse:
    return pb.CheckResponse(
        status=status_pb2.Status(code=16),
        denied_response=pb.DeniedHttpResponse(
            status=http_status_pb2.HttpStatus(code=401),
            headers=[
                _header("content-type", "application/json"),
                _header("www-authenticate", 'Bearer realm="orrery-a2a"'),
            ],
            body=json.dumps({"error": reason, "error_description": reason}),
        ),
    )


class Fake(pb_grpc.AuthorizationServicer):  # type: ignore[misc]
    def __init__(self, env: dict[str, str], jwks: dict[str, Any]) -> None:
        self.env = env
        self.keys = {key["kid"]: jwt.PyJWK(key) for key in jwks["keys"]}
        self.assertion_keys = assertion.AssertionKeys.parse(env["ORRERY_A2A_ASSERTION_KEYS"])

    async def Check(self, request: Any, context: Any) -> Any:  # noqa: N802
        http = request.attributes.request.http
        surface = request.attributes.context_extensions.get("surface", "a2a")
        scheme, _, token = http.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token:
            return _deny("missing_credential")
        audience = self.env[
            "ORRERY_CONSOLE_JWT_AUDIENCE" if surface == "approvals" else "ORRERY_A2A_JWT_AUDIENCE"
        ]
        try:
            kid = jwt.get_unverified_header(token)["kid"]
            claims = jwt.decode(
                token,
                self.keys[kid],
                algorithms=["ES256"],
                audience=audience,
                issuer=self.env["ORRERY_A2A_JWT_ISSUER"],
            )
        except (jwt.PyJWTError, KeyError):
            return _deny("token_invalid")
        act = claims.get("act")
        kind = "human" if surface == "approvals" else ("delegated" if act else "service")
        role = claims["roles"][0]
        autonomy = AUTONOMY[role] if kind != "service" else min(AUTONOMY[role], "L2")
        principal = Principal(
            kind=kind,
            subject=claims["sub"],
            client=claims.get("client_id", ""),
            agent=act["sub"] if act else "",
            role=role,
            autonomy=autonomy,  # type: ignore[arg-type]
        )
        signed = assertion.sign(
            self.assertion_keys,
            principal,
            surface=surface,
            request_id=http.headers["x-request-id"],
            token_expires_at=claims["exp"],
            now=int(time.time()),
        )
        ok = pb.OkHttpResponse(
            headers=[_header(assertion.HEADER, signed)],
            headers_to_remove=["authorization", "traceparent", "tracestate"],
        )
        return pb.CheckResponse(status=status_pb2.Status(code=0), ok_response=ok)


async def main() -> int:
    env = dict(os.environ)
    logs.configure()
    if env.get("FAKE_AUTHZ_FAIL"):
        print("invalid configuration:\n  ORRERY_A2A_JWT_ISSUER: is required", file=sys.stderr)
        return 2
    with urllib.request.urlopen(env["ORRERY_A2A_JWKS_URL"], timeout=10) as response:  # noqa: S310
        jwks = json.load(response)
    server = grpc.aio.server()
    pb_grpc.add_AuthorizationServicer_to_server(Fake(env, jwks), server)
    port = server.add_insecure_port(env["ORRERY_A2A_AUTHZ_ADDR"])
    await server.start()
    host = env["ORRERY_A2A_AUTHZ_ADDR"].rpartition(":")[0]
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(signum, stop.set)
    logs.event(log, "serving", grpc=f"{host}:{port}", metrics=env["ORRERY_A2A_AUTHZ_METRICS_ADDR"])
    die_when = env.get("FAKE_AUTHZ_DIE_WHEN")
    while die_when and not stop.is_set():
        if os.path.exists(die_when):  # noqa: PTH110 (a test knob, polled)
            print("fake authz: dying on purpose", file=sys.stderr)
            return 3
        await asyncio.sleep(0.1)
    await stop.wait()
    await server.stop(grace=1)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
