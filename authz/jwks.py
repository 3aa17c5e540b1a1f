"""Verification keys: where they come from, when they are reloaded, when they stop being trusted.

Keys come only from the configured JWKS (a URL or a file), never from a token. `KeyStore` holds
the current `KeySet` and keeps it fresh:

* a background task reloads it every `refresh` (a URL is fetched, a file is re-read when its
  stat changes) and retries sooner after a failure;
* a token naming an unknown `kid` may trigger one reload, but at most one per `cooldown` (counted
  from the last load of any kind), and the unknown `kid` is then cached as unknown for that long —
  so a flood of random `kid`s costs at most one fetch per cooldown, never one per request
  (go-oidc refetches on every miss, Envoy's jwt_authn never:
  docs/envoy-notes.md#unknown-kid-and-key-refetching);
* concurrent reloads share one in-flight load (singleflight);
* when loads fail, the last good keys are kept for at most `stale` seconds after the last
  successful load; after that the store is not usable, authz answers NOT_SERVING and denies.

Fetching and parsing run in a worker thread (`asyncio.to_thread`), so the event loop answering
Checks never waits on DNS, TLS or a slow IdP. The fetch follows no redirects, reads at most 64 KiB,
uses no proxy from the environment and is bounded by `timeout`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol
from urllib.parse import urlsplit

from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa

from authz.errors import KeysUnavailable, UnknownSigningKey
from authz.settings import JwksSettings
from contract.jose import b64url_decode, strict_json
from runtime import logs

MAX_JWKS_BYTES = 64 * 1024
MIN_RSA_BITS = 2048
MAX_NEGATIVE_KIDS = 1024

PublicKey = (
    rsa.RSAPublicKey | ec.EllipticCurvePublicKey | ed25519.Ed25519PublicKey | ed448.Ed448PublicKey
)

_CURVES: Mapping[str, tuple[ec.EllipticCurve, int]] = {
    "P-256": (ec.SECP256R1(), 32),
    "P-384": (ec.SECP384R1(), 48),
    "P-521": (ec.SECP521R1(), 66),
}
_OKP: Mapping[str, tuple[Callable[[bytes], PublicKey], int]] = {
    "Ed25519": (ed25519.Ed25519PublicKey.from_public_bytes, 32),
    "Ed448": (ed448.Ed448PublicKey.from_public_bytes, 57),
}
_PUBLIC_MEMBERS: Mapping[str, tuple[str, ...]] = {
    "RSA": ("n", "e"),
    "EC": ("crv", "x", "y"),
    "OKP": ("crv", "x"),
}

logger = logging.getLogger("authz.jwks")


class JwksError(Exception):
    """A key set could not be loaded; the message is ours (safe to log), never the body."""


@dataclass(frozen=True, slots=True, eq=False)
class VerificationKey:
    """One public key from the JWKS.

    `family` names the key type precisely enough to match an algorithm (`RSA`, `EC-P-256`,
    `Ed25519`…). `alg` is the JWK's own `alg` restriction, if it has one. Compared by identity:
    a reload that publishes the same JWK again reuses this object (see `parse_jwks`), so a cached
    token can tell "my key is still published" with one `is`.
    """

    kid: str
    family: str
    alg: str | None
    key: PublicKey
    fingerprint: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class KeySet:
    """An immutable `kid` → key mapping, as published at one moment."""

    keys: Mapping[str, VerificationKey]

    def get(self, kid: str) -> VerificationKey | None:
        return self.keys.get(kid)

    def __len__(self) -> int:
        return len(self.keys)


EMPTY = KeySet({})


def parse_jwks(raw: bytes, previous: KeySet = EMPTY) -> tuple[KeySet, list[str]]:
    """Parse a JWKS document into usable signature keys, plus what was skipped and why.

    A key is skipped (not fatal) when it cannot be used safely: no `kid`, a `kid` published twice
    (ambiguous), `use` other than `sig`, `key_ops` without `verify`, private key material, an
    unsupported type or curve, or an RSA modulus under 2048 bits. A document that is not a JSON
    object with a `keys` array, or that yields no usable key, is an error.
    """
    try:
        document = strict_json(raw)
    except ValueError:
        raise JwksError("JWKS is not valid JSON (or has duplicate members)") from None
    if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
        raise JwksError("JWKS is not an object with a keys array")
    skipped: list[str] = []
    parsed: dict[str, VerificationKey] = {}
    duplicates: set[str] = set()
    for position, jwk in enumerate(document["keys"]):
        try:
            key = _parse_jwk(jwk, previous)
        except (ValueError, TypeError) as exc:
            skipped.append(f"key {position}: {exc}")
            continue
        if key.kid in parsed or key.kid in duplicates:
            duplicates.add(key.kid)
            parsed.pop(key.kid, None)
            skipped.append(f"key {position}: kid published more than once")
            continue
        parsed[key.kid] = key
    if not parsed:
        raise JwksError("JWKS holds no usable signature key")
    return KeySet(parsed), skipped


def _parse_jwk(jwk: Any, previous: KeySet) -> VerificationKey:
    if not isinstance(jwk, dict):
        raise TypeError("not an object")
    kid, kty, alg = jwk.get("kid"), jwk.get("kty"), jwk.get("alg")
    if not isinstance(kid, str) or not kid:
        raise ValueError("no kid")
    if jwk.get("use", "sig") != "sig":
        raise ValueError("use is not sig")
    ops = jwk.get("key_ops")
    if ops is not None and (not isinstance(ops, list) or "verify" not in ops):
        raise ValueError("key_ops does not allow verify")
    if "d" in jwk:
        raise ValueError("private key material is never accepted")
    if alg is not None and not isinstance(alg, str):
        raise ValueError("alg is not a string")
    if not isinstance(kty, str) or kty not in _PUBLIC_MEMBERS:
        raise ValueError("unsupported kty")
    members = _PUBLIC_MEMBERS[kty]
    values = tuple(value for name in members if isinstance(value := jwk.get(name), str))
    if len(values) != len(members):
        raise ValueError(f"{kty} key needs {', '.join(members)}")
    fingerprint = (kty, *values, alg or "")
    known = previous.get(kid)
    if known is not None and known.fingerprint == fingerprint:
        return known
    family, key = _public_key(kty, jwk)
    return VerificationKey(kid=kid, family=family, alg=alg, key=key, fingerprint=fingerprint)


def _b64_uint(text: str) -> int:
    return int.from_bytes(b64url_decode(text), "big")


def _public_key(kty: str, jwk: Mapping[str, str]) -> tuple[str, PublicKey]:
    if kty == "RSA":
        public = rsa.RSAPublicNumbers(_b64_uint(jwk["e"]), _b64_uint(jwk["n"])).public_key()
        if public.key_size < MIN_RSA_BITS:
            raise ValueError(f"RSA key is smaller than {MIN_RSA_BITS} bits")
        return "RSA", public
    if kty == "EC":
        curve = _CURVES.get(jwk["crv"])
        if curve is None:
            raise ValueError("unsupported EC curve")
        x, y = b64url_decode(jwk["x"]), b64url_decode(jwk["y"])
        if len(x) != curve[1] or len(y) != curve[1]:
            raise ValueError("EC coordinates have the wrong length")
        numbers = ec.EllipticCurvePublicNumbers(
            int.from_bytes(x, "big"), int.from_bytes(y, "big"), curve[0]
        )
        return f"EC-{jwk['crv']}", numbers.public_key()  # raises ValueError off the curve
    okp = _OKP.get(jwk["crv"])
    if okp is None:
        raise ValueError("unsupported OKP curve")
    x = b64url_decode(jwk["x"])
    if len(x) != okp[1]:
        raise ValueError("OKP key has the wrong length")
    return jwk["crv"], okp[0](x)


class KeySource(Protocol):
    """Where the JWKS document comes from. `load` blocks; it runs in a worker thread."""

    description: str

    def load(self) -> bytes | None:
        """The document, or None when it is unchanged since the last `confirm`."""

    def confirm(self) -> None:
        """The last loaded document parsed well; later loads may report "unchanged"."""


class UrlSource:
    """HTTPS (or loopback HTTP) fetch: no redirects, no proxy, 64 KiB cap, bounded time.

    Sends `If-None-Match` with the last good ETag, so an unchanged key set costs a 304.
    """

    def __init__(self, url: str, timeout: float) -> None:
        parts = urlsplit(url)
        self.description = f"{parts.scheme}://{parts.netloc}{parts.path}"  # no query in logs
        self._url = url
        self._timeout = timeout
        self._etag: str | None = None
        self._pending_etag: str | None = None
        # An opener with exactly these handlers: no redirect handler (a 3xx is an error), no
        # proxy handler (an environment proxy must not see or steer key fetches).
        self._opener = urllib.request.OpenerDirector()
        for handler in (
            urllib.request.HTTPHandler(),
            urllib.request.HTTPSHandler(context=ssl.create_default_context()),
            urllib.request.HTTPDefaultErrorHandler(),
            urllib.request.HTTPErrorProcessor(),
        ):
            self._opener.add_handler(handler)

    def load(self) -> bytes | None:
        headers = {
            "Accept": "application/jwk-set+json, application/json",
            "User-Agent": "orrery-a2a-authz",
        }
        if self._etag:
            headers["If-None-Match"] = self._etag
        request = urllib.request.Request(self._url, headers=headers)  # noqa: S310 (scheme checked in settings)
        deadline = time.monotonic() + self._timeout
        try:
            with self._opener.open(request, timeout=self._timeout) as response:
                body = _read_capped(response, deadline)
                self._pending_etag = response.headers.get("ETag")
        except urllib.error.HTTPError as exc:
            if exc.code == 304 and self._etag:
                return None
            raise JwksError(f"JWKS fetch answered HTTP {exc.code}") from None
        except (OSError, ValueError) as exc:  # URLError, timeouts, TLS, connection errors
            raise JwksError(f"JWKS fetch failed ({type(exc).__name__})") from None
        return body

    def confirm(self) -> None:
        self._etag = self._pending_etag


def _read_capped(response: Any, deadline: float) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while chunk := response.read1(16384):
        size += len(chunk)
        if size > MAX_JWKS_BYTES:
            raise JwksError(f"JWKS is larger than {MAX_JWKS_BYTES} bytes")
        if time.monotonic() > deadline:
            raise JwksError("JWKS fetch took too long")
        chunks.append(chunk)
    return b"".join(chunks)


class FileSource:
    """A JWKS file, re-read only when its inode, size or modification time changes."""

    def __init__(self, path: Path) -> None:
        self.description = str(path)
        self._path = path
        self._seen: tuple[int, int, int] | None = None
        self._pending: tuple[int, int, int] | None = None

    def load(self) -> bytes | None:
        try:
            stat = self._path.stat()
            signature = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
            if signature == self._seen:
                return None
            if stat.st_size > MAX_JWKS_BYTES:
                raise JwksError(f"JWKS is larger than {MAX_JWKS_BYTES} bytes")
            data = self._path.read_bytes()
        except OSError as exc:
            raise JwksError(f"JWKS file unreadable ({type(exc).__name__})") from None
        self._pending = signature
        return data

    def confirm(self) -> None:
        self._seen = self._pending


def source_for(settings: JwksSettings) -> KeySource:
    if settings.url is not None:
        return UrlSource(settings.url, settings.timeout)
    if settings.file is None:  # settings validation guarantees one of them
        raise ValueError("no JWKS source configured")
    return FileSource(settings.file)


RefreshOutcome = Literal["updated", "unchanged", "error"]


class KeyStore:
    """The current key set, kept fresh in the background, reloaded on demand within limits.

    `on_refresh(outcome)` is told about every load ("updated", "unchanged" or "error") and
    `on_usable(bool)` whenever usability may have changed (after each load and at the moment the
    stale window closes), so metrics and the gRPC health status follow the keys.
    """

    def __init__(
        self,
        settings: JwksSettings,
        source: KeySource,
        *,
        on_refresh: Callable[[RefreshOutcome, int], None] = lambda outcome, count: None,
        on_usable: Callable[[bool], Awaitable[None]] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._settings = settings
        self._source = source
        self._on_refresh = on_refresh
        self._on_usable = on_usable
        self._clock = clock
        self.current: KeySet = EMPTY
        self._good_at: float | None = None  # when a load last succeeded (or confirmed unchanged)
        self._loaded_at = float("-inf")  # when a load was last attempted
        self._last_ok = False
        self._inflight: asyncio.Task[None] | None = None
        self._unknown: dict[str, float] = {}
        self._task: asyncio.Task[None] | None = None

    def usable(self, now: float | None = None) -> bool:
        """True while keys are loaded and the last good load is within the stale window."""
        if self._good_at is None or not self.current:
            return False
        return (self._clock() if now is None else now) - self._good_at <= self._settings.stale

    async def start(self) -> None:
        """Load once (a failure is not fatal: the store stays unusable), then keep refreshing."""
        await self.refresh()
        self._task = asyncio.create_task(self._refresh_forever(), name="jwks-refresh")

    async def close(self) -> None:
        tasks = [task for task in (self._task, self._inflight) if task is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def key_for(self, kid: str) -> VerificationKey:
        """The key for `kid`, reloading at most once per cooldown for a `kid` we do not know."""
        now = self._clock()
        if not self.usable(now):
            raise KeysUnavailable("no usable signing keys")
        key = self.current.get(kid)
        if key is not None:
            return key
        if self._unknown.get(kid, float("-inf")) > now:
            raise UnknownSigningKey("token signed with an unknown key")
        if now - self._loaded_at >= self._settings.cooldown:
            await self.refresh()
            key = self.current.get(kid)
            if key is not None:
                return key
        self._remember_unknown(kid, now)
        raise UnknownSigningKey("token signed with an unknown key")

    def _remember_unknown(self, kid: str, now: float) -> None:
        if len(self._unknown) >= MAX_NEGATIVE_KIDS:
            self._unknown = {k: until for k, until in self._unknown.items() if until > now}
            while len(self._unknown) >= MAX_NEGATIVE_KIDS:
                del self._unknown[next(iter(self._unknown))]
        self._unknown[kid] = now + self._settings.cooldown

    async def refresh(self) -> None:
        """Load now, or join the load already in flight (never two at once)."""
        if self._inflight is None:
            self._inflight = asyncio.create_task(self._load(), name="jwks-load")
            self._inflight.add_done_callback(self._clear_inflight)
        # shield: a Check cancelled by Envoy's timeout must not cancel the shared load.
        await asyncio.shield(self._inflight)

    def _clear_inflight(self, _: asyncio.Task[None]) -> None:
        self._inflight = None

    async def _load(self) -> None:
        self._loaded_at = self._clock()
        try:
            keyset, skipped = await asyncio.to_thread(self._load_blocking, self.current)
        except JwksError as exc:
            self._last_ok = False
            self._on_refresh("error", len(self.current))
            logs.event(
                logger,
                "jwks_refresh_failed",
                logging.WARNING,
                source=self._source.description,
                error=str(exc),
                keys=len(self.current),
                usable=self.usable(),
            )
        else:
            self._last_ok = True
            self._good_at = self._clock()
            if keyset is None:
                self._on_refresh("unchanged", len(self.current))
            else:
                self._on_refresh("updated", len(keyset))
                self._log_update(keyset, skipped)
                self.current = keyset
                self._unknown.clear()
        await self._publish()

    def _load_blocking(self, previous: KeySet) -> tuple[KeySet | None, list[str]]:
        raw = self._source.load()
        if raw is None:
            return None, []
        keyset, skipped = parse_jwks(raw, previous)
        self._source.confirm()
        return keyset, skipped

    def _log_update(self, keyset: KeySet, skipped: list[str]) -> None:
        logs.event(
            logger,
            "jwks_updated",
            source=self._source.description,
            kids=sorted(keyset.keys),
            added=sorted(set(keyset.keys) - set(self.current.keys)),
            removed=sorted(set(self.current.keys) - set(keyset.keys)),
            skipped=skipped,
        )

    async def _publish(self) -> None:
        if self._on_usable is not None:
            await self._on_usable(self.usable())

    def _next_load(self) -> float:
        return self._loaded_at + (self._settings.refresh if self._last_ok else self._settings.retry)

    async def _refresh_forever(self) -> None:
        while True:
            wake = self._next_load()
            if self._good_at is not None and self.usable():
                # Also wake when the stale window closes, so health flips on time.
                wake = min(wake, self._good_at + self._settings.stale + 0.001)
            await asyncio.sleep(max(wake - self._clock(), 0.0))
            try:
                if self._clock() >= self._next_load():
                    await self.refresh()
                else:
                    await self._publish()
            except Exception:  # a bug must not silently end refreshing; the keys would go stale
                logger.exception("jwks_refresh_bug")
