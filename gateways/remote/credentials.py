"""The outbound credential of each remote agent: never the inbound caller's token.

A remote agent gets a token for its own audience, from one of three configured sources:

* none: no `Authorization` header (a public agent);
* a file (`_TOKEN_FILE`, a mounted Secret that a sidecar or the platform rotates): re-read when
  its modification time, size or inode changes, so a rotated token is used from the next call;
* an OAuth 2.0 token endpoint (`_TOKEN_URL`), authenticated with `_CLIENT_ID` and the secret in
  `_CLIENT_SECRET_FILE` (HTTP Basic), for `_AUDIENCE`/`_SCOPE`: the client credentials grant
  (RFC 6749 §4.4), or token exchange (RFC 8693 §2.1): the subject token from its file, and this
  platform's own token as `actor_token`, so the issued token names the platform in `act` (§4.1)
  — the inbound caller's token is never a subject or an actor. A token is kept until 30 s
  before its `expires_in`; the next one is asked with the files as they are then.

The endpoint is reached through the same guarded transport as the agent (its own origin, the same
address rules, no redirects, bounded body). No token or secret ever reaches a log or an error text.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import httpx

from gateways.remote.errors import RemoteAgentError
from gateways.remote.settings import RemoteAgent, RemoteSettings, TokenEndpoint
from gateways.remote.transport import GuardedTransport

EXPIRY_MARGIN = 30.0
DEFAULT_LIFETIME = 300.0


class TokenSource(Protocol):
    async def token(self) -> str | None: ...


class NoToken:
    async def token(self) -> str | None:
        return None


class FileToken:
    """A token file, re-read whenever it changes (see the module docstring)."""

    def __init__(self, path: Path, what: str = "token file") -> None:
        self._path = path
        self._what = what
        self._seen: tuple[int, int, int] | None = None
        self._value = ""

    async def token(self) -> str | None:
        return await asyncio.to_thread(self.read)

    def read(self) -> str:
        try:
            stat = self._path.stat()
            signature = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
            if signature != self._seen:
                self._value = self._path.read_text(encoding="utf-8").strip()
                self._seen = signature
        except (OSError, UnicodeDecodeError):
            raise RemoteAgentError(
                "credentials_unavailable", f"the outbound {self._what} cannot be read"
            ) from None
        if not self._value:
            raise RemoteAgentError("credentials_unavailable", f"the outbound {self._what} is empty")
        return self._value


TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"  # noqa: S105 - a grant name
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"  # noqa: S105 - a type name


class EndpointToken:
    """Tokens from an OAuth token endpoint, kept until shortly before they expire."""

    def __init__(
        self,
        endpoint: TokenEndpoint,
        settings: RemoteSettings,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._endpoint = endpoint
        self._settings = settings
        self._secret = FileToken(endpoint.client_secret_file, "client secret file")
        self._subject = (
            FileToken(endpoint.subject_token_file, "subject token file")
            if endpoint.subject_token_file
            else None
        )
        self._actor = (
            FileToken(endpoint.actor_token_file, "actor token file")
            if endpoint.actor_token_file
            else None
        )
        self._clock = clock
        self._lock = asyncio.Lock()
        self._value: str | None = None
        self._until = 0.0

    async def token(self) -> str | None:
        async with self._lock:
            if self._value is None or self._clock() >= self._until:
                self._value, lifetime = await self._fetch()
                self._until = self._clock() + max(lifetime - EXPIRY_MARGIN, 0.0)
            return self._value

    async def _form(self) -> dict[str, str]:
        """The grant's form fields (the files read now: a rotated one is used at once)."""
        if self._subject is None:
            form = {"grant_type": "client_credentials"}
        else:
            form = {
                "grant_type": TOKEN_EXCHANGE,
                "subject_token": await asyncio.to_thread(self._subject.read),
                "subject_token_type": ACCESS_TOKEN_TYPE,
                "requested_token_type": ACCESS_TOKEN_TYPE,
            }
            if self._actor is not None:
                form["actor_token"] = await asyncio.to_thread(self._actor.read)
                form["actor_token_type"] = ACCESS_TOKEN_TYPE
        if self._endpoint.audience:
            form["audience"] = self._endpoint.audience
        if self._endpoint.scope:
            form["scope"] = self._endpoint.scope
        return form

    async def _fetch(self) -> tuple[str, float]:
        form = await self._form()
        secret = await asyncio.to_thread(self._secret.read)
        transport = GuardedTransport(self._endpoint.url, self._settings)
        try:
            async with httpx.AsyncClient(
                transport=transport, follow_redirects=False, timeout=self._settings.timeout
            ) as http:
                response = await http.post(
                    self._endpoint.url,
                    data=form,
                    auth=(self._endpoint.client_id, secret),
                    headers={"Accept": "application/json"},
                )
                body = response.json()
        except (RemoteAgentError, httpx.HTTPError, ValueError):
            raise RemoteAgentError(
                "credentials_unavailable", "the token endpoint did not issue a token"
            ) from None
        token = body.get("access_token") if isinstance(body, dict) else None
        if not isinstance(token, str) or not token:
            raise RemoteAgentError(
                "credentials_unavailable", "the token endpoint's answer holds no access_token"
            )
        lifetime = body.get("expires_in", DEFAULT_LIFETIME)
        valid = isinstance(lifetime, int | float) and not isinstance(lifetime, bool)
        return token, float(lifetime) if valid else DEFAULT_LIFETIME


def token_source(agent: RemoteAgent, settings: RemoteSettings) -> TokenSource:
    """The configured source of `agent`'s outbound token."""
    if agent.token_file is not None:
        return FileToken(agent.token_file)
    if agent.token_endpoint is not None:
        return EndpointToken(agent.token_endpoint, settings)
    return NoToken()
