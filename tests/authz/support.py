"""Test plumbing for authz: an in-test token issuer, a real JWKS HTTP server, a real authz server.

Keys are generated at test time (cryptography). The issuer signs whatever header and payload a
test asks for — including raw JSON with duplicate members — so each token rule can be attacked
directly, not only through a well-behaved library.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import secrets
import time
import urllib.request
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from aiohttp import web
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from envoy.service.auth.v3 import external_auth_pb2_grpc
from envoy.service.auth.v3.external_auth_pb2 import CheckRequest, CheckResponse
from grpc_health.v1 import health_pb2, health_pb2_grpc

from authz.server import Bound, serve
from authz.settings import AuthzSettings
from contract.assertion import Assertion, AssertionKeys, new_keys_spec, verify
from contract.headers import PRINCIPAL_HEADER
from contract.identity import Surface
from contract.jose import b64url_encode
from tests.keys import private_key

ISSUER = "https://issuer.test"
AUDIENCE = "orrery-a2a"
CONSOLE = "orrery-console"
CONSOLE_CLIENT = "console"  # the one client ORRERY_CONSOLE_CLIENTS names in these tests


def b64int(number: int) -> str:
    return b64url_encode(number.to_bytes((number.bit_length() + 7) // 8, "big"))


@dataclass
class SigningKey:
    """A private key with its JWS algorithm and public JWK."""

    kid: str
    alg: str
    private: Any

    @classmethod
    def generate(cls, alg: str, kid: str | None = None) -> SigningKey:
        return cls(kid or f"{alg.lower()}-{secrets.token_hex(4)}", alg, private_key(alg))

    def jwk(self, **extra: Any) -> dict[str, Any]:
        public = self.private.public_key()
        if isinstance(public, rsa.RSAPublicKey):
            numbers = public.public_numbers()
            jwk = {"kty": "RSA", "n": b64int(numbers.n), "e": b64int(numbers.e)}
        elif isinstance(public, ec.EllipticCurvePublicKey):
            size = (public.curve.key_size + 7) // 8
            point = public.public_numbers()
            crv = {256: "P-256", 384: "P-384"}[public.curve.key_size]
            jwk = {
                "kty": "EC",
                "crv": crv,
                "x": b64url_encode(point.x.to_bytes(size, "big")),
                "y": b64url_encode(point.y.to_bytes(size, "big")),
            }
        else:
            raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
            jwk = {"kty": "OKP", "crv": "Ed25519", "x": b64url_encode(raw)}
        return {"kid": self.kid, "use": "sig", "alg": self.alg, **jwk, **extra}

    def public_pem(self) -> bytes:
        pem: bytes = self.private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        return pem

    def sign(self, data: bytes) -> bytes:
        alg, key = self.alg, self.private
        if alg.startswith("RS"):
            return bytes(key.sign(data, padding.PKCS1v15(), hashes.SHA256()))
        if alg.startswith("PS"):
            pss = padding.PSS(mgf=padding.MGF1(hashes.SHA256()), salt_length=32)
            return bytes(key.sign(data, pss, hashes.SHA256()))
        if alg.startswith("ES"):
            digest = hashes.SHA256() if alg == "ES256" else hashes.SHA384()
            r, s = decode_dss_signature(key.sign(data, ec.ECDSA(digest)))
            size = (key.curve.key_size + 7) // 8
            return r.to_bytes(size, "big") + s.to_bytes(size, "big")
        return bytes(key.sign(data))


@dataclass
class Issuer:
    """Mints tokens the way an IdP would — or the way an attacker would, when asked."""

    keys: list[SigningKey] = field(default_factory=list)

    @classmethod
    def with_keys(cls, *algs: str) -> Issuer:
        return cls([SigningKey.generate(alg) for alg in algs or ("ES256",)])

    @property
    def key(self) -> SigningKey:
        return self.keys[0]

    def jwks(self) -> dict[str, Any]:
        return {"keys": [key.jwk() for key in self.keys]}

    def claims(self, **overrides: Any) -> dict[str, Any]:
        now = int(time.time())
        claims: dict[str, Any] = {
            "iss": ISSUER,
            "aud": AUDIENCE,
            "sub": "svc-reporter",
            "client_id": "svc-reporter",
            "iat": now,
            "exp": now + 600,
            "roles": ["operator"],
        }
        claims.update(overrides)
        return {name: value for name, value in claims.items() if value is not DROP}

    def token(
        self,
        claims: Mapping[str, Any] | None = None,
        *,
        key: SigningKey | None = None,
        header: Mapping[str, Any] | None = None,
        raw_header: str | None = None,
        raw_payload: str | None = None,
        signature: bytes | None = None,
        **claim_overrides: Any,
    ) -> str:
        key = key or self.key
        head = {"alg": key.alg, "kid": key.kid, "typ": "JWT"}
        if header is not None:
            head = {name: value for name, value in {**head, **header}.items() if value is not DROP}
        body = dict(claims) if claims is not None else self.claims(**claim_overrides)
        head_b64 = b64url_encode((raw_header or json.dumps(head)).encode())
        body_b64 = b64url_encode((raw_payload or json.dumps(body)).encode())
        signing_input = f"{head_b64}.{body_b64}".encode()
        if signature is None:
            signature = key.sign(signing_input)
        return f"{head_b64}.{body_b64}.{b64url_encode(signature)}"

    def hmac_token(self, secret: bytes, **claim_overrides: Any) -> str:
        """The classic key-confusion forgery: HS256 keyed with something public."""
        head = b64url_encode(
            json.dumps({"alg": "HS256", "kid": self.key.kid, "typ": "JWT"}).encode()
        )
        body = b64url_encode(json.dumps(self.claims(**claim_overrides)).encode())
        mac = hmac.new(secret, f"{head}.{body}".encode(), hashlib.sha256).digest()
        return f"{head}.{body}.{b64url_encode(mac)}"


class _Drop:
    def __repr__(self) -> str:
        return "DROP"


DROP: Any = _Drop()  # a claim/header value meaning "leave this member out"


class JwksServer:
    """A real HTTP server (aiohttp, port 0) publishing a JWKS that tests can change or break."""

    def __init__(self, document: Mapping[str, Any]) -> None:
        self.document: Any = document
        self.fetches = 0
        self.not_modified = 0
        self.status = 200
        self.delay = 0.0
        self.redirect_to: str | None = None
        self.body: bytes | None = None
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.fetches += 1
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.redirect_to is not None:
            raise web.HTTPFound(self.redirect_to)
        if self.status != 200:
            return web.Response(status=self.status, text="broken")
        body = self.body if self.body is not None else json.dumps(self.document).encode()
        etag = '"' + hashlib.sha256(body).hexdigest()[:16] + '"'
        if request.headers.get("If-None-Match") == etag:
            self.not_modified += 1
            return web.Response(status=304, headers={"ETag": etag})
        return web.Response(body=body, content_type="application/json", headers={"ETag": etag})

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/jwks.json", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}/jwks.json"

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


def base_env(jwks_file: Path | None = None, jwks_url: str | None = None) -> dict[str, str]:
    env = {
        "ORRERY_A2A_AUTHZ_ADDR": "127.0.0.1:0",
        "ORRERY_A2A_AUTHZ_DIAG_ADDR": "127.0.0.1:0",
        "ORRERY_A2A_JWT_ISSUER": ISSUER,
        "ORRERY_A2A_JWT_AUDIENCE": AUDIENCE,
        "ORRERY_CONSOLE_JWT_AUDIENCE": CONSOLE,
        "ORRERY_CONSOLE_CLIENTS": CONSOLE_CLIENT,
        "ORRERY_A2A_ASSERTION_KEYS": new_keys_spec("a1"),
        "ORRERY_A2A_RATE_LIMIT": "1000/second",
    }
    if jwks_file is not None:
        env["ORRERY_A2A_JWKS_FILE"] = str(jwks_file)
    if jwks_url is not None:
        env["ORRERY_A2A_JWKS_URL"] = jwks_url
    return env


@dataclass
class RunningAuthz:
    """An authz server running in this event loop, with a real gRPC client connected to it."""

    settings: AuthzSettings
    bound: Bound
    channel: grpc.aio.Channel
    stub: Any
    health: Any

    async def check(
        self,
        headers: Mapping[str, str] | None = None,
        *,
        token: str | None = None,
        surface: str | None = None,
        path: str | None = None,
        request_id: str | None = "req-1",
        source: str | None = None,
    ) -> CheckResponse:
        """A Check as our Envoy sends it: `surface` is the route label, and the path is that
        route's unless given; `source` is the client's address as the proxy saw it."""
        request = CheckRequest()
        if source is not None:
            request.attributes.source.address.socket_address.address = source
        http = request.attributes.request.http
        if path is None:
            path = "/approvals/an-action-id" if surface == "approvals" else "/a2a"
        http.method, http.path = "POST", path
        if request_id is not None:
            http.headers["x-request-id"] = request_id
        if token is not None:
            http.headers["authorization"] = f"Bearer {token}"
        for name, value in (headers or {}).items():
            http.headers[name] = value
        if surface is not None:
            request.attributes.context_extensions["surface"] = surface
        response: CheckResponse = await self.stub.Check(request, timeout=30)
        return response

    async def health_status(self, service: str = "") -> int:
        reply = await self.health.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
        return int(reply.status)


@contextlib.asynccontextmanager
async def running_authz(
    env: Mapping[str, str], *, clock: Callable[[], float] = time.monotonic
) -> AsyncIterator[RunningAuthz]:
    """authz in this event loop; `clock` times its key cooldowns and local limits."""
    settings = AuthzSettings.from_env(env)
    stop = asyncio.Event()
    ready: asyncio.Future[Bound] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(serve(settings, stop, ready.set_result, clock=clock))
    started: set[asyncio.Future[Any]] = {task, ready}
    done, _ = await asyncio.wait(started, return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        task.result()  # raises the start-up error
    bound = ready.result()
    channel = grpc.aio.insecure_channel(bound.grpc)
    try:
        yield RunningAuthz(
            settings,
            bound,
            channel,
            external_auth_pb2_grpc.AuthorizationStub(channel),
            health_pb2_grpc.HealthStub(channel),
        )
    finally:
        await channel.close()
        stop.set()
        await task


class RedisProxy:
    """A TCP proxy in front of the real Redis that a test can break on purpose.

    Modes: "up" forwards bytes; "refuse" closes every connection at once (Redis down);
    "blackhole" accepts and never answers (a hung Redis or a dropped network path).
    """

    def __init__(self, target_host: str, target_port: int) -> None:
        self.mode = "up"
        self._target = (target_host, target_port)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.port = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def set_mode(self, mode: str) -> None:
        """Switch mode; existing connections are cut so the change applies at once."""
        self.mode = mode
        for writer in list(self._writers):
            writer.close()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            if self.mode == "refuse":
                return
            if self.mode == "blackhole":
                while await reader.read(65536):
                    pass
                return
            upstream_reader, upstream_writer = await asyncio.open_connection(*self._target)
            self._writers.add(upstream_writer)
            await asyncio.gather(
                self._pipe(reader, upstream_writer), self._pipe(upstream_reader, writer)
            )
        except (ConnectionError, OSError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        finally:
            writer.close()

    async def close(self) -> None:
        self.set_mode("refuse")
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


@dataclass(frozen=True)
class Denied:
    """A DeniedHttpResponse, flattened for assertions."""

    status: int
    reason: str
    description: str
    headers: dict[str, str]


def denied(response: CheckResponse) -> Denied:
    assert response.status.code != 0, "expected a denial, got OK"
    assert response.HasField("denied_response")
    body = json.loads(response.denied_response.body)
    assert set(body) == {"error", "error_description"}
    headers = {h.header.key: h.header.value for h in response.denied_response.headers}
    return Denied(
        response.denied_response.status.code, body["error"], body["error_description"], headers
    )


def adapter_verify(
    keys: AssertionKeys,
    response: CheckResponse,
    *,
    request_id: str = "req-1",
    surface: Surface = "a2a",
    later: int = 0,
) -> Assertion:
    """What the adapter does with the header Envoy injected from `response` (`later` s on)."""
    return verify(
        keys,
        ok_headers(response)[PRINCIPAL_HEADER],
        request_id=request_id,
        surface=surface,
        now=int(time.time()) + later,
    )


def ok_headers(response: CheckResponse) -> dict[str, str]:
    assert response.status.code == 0, f"expected OK, got {response.denied_response.body}"
    return {h.header.key: h.header.value for h in response.ok_response.headers}


def fetch(url: str) -> str:
    """GET a diagnostics URL of a test authz (blocking: call it in a thread)."""
    with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 - our http URL
        return str(response.read().decode())
