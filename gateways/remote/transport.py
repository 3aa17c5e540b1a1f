"""The one door every outbound request of a remote call goes through (card, key set, token, call).

An httpx transport, so no code path of the a2a-sdk client or ours can skip it:

* the request's origin must be the one this transport was made for (the card's, or the token
  endpoint's): a card cannot send the call, or its key set fetch, anywhere else;
* every address the host resolves to must be public, unless it lies in
  `ORRERY_A2A_REMOTE_ALLOW_NETWORKS`, and the connection goes to the address checked (so a name
  that changes its answer between the check and the connect cannot move it); the peer actually
  connected to is checked again;
* every request carries `x-orrery-hop`, so a receiving Orrery edge refuses it (508
  `loop_detected`) and two platforms cannot loop at model cost;
* a 3xx is refused (redirects are never followed), a 4xx/5xx becomes `remote_refused` with the
  edge's reason code when it sent one, and a body is read at most up to the byte cap.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
import json
import socket
import ssl
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from contract.headers import HOP_HEADER
from gateways.remote.errors import RemoteAgentError
from gateways.remote.settings import Network, RemoteSettings

HOP_VALUE = "1"
_REASON_BYTES = 4096


@functools.cache
def _tls(ca_file: Path | None) -> ssl.SSLContext:
    """One TLS context per CA bundle for the process: loading a bundle costs tens of
    milliseconds, which every call would otherwise pay (bench/outbound_bench.py)."""
    if ca_file is not None:
        return ssl.create_default_context(cafile=str(ca_file))
    return httpx.create_ssl_context(trust_env=False)


def origin_of(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of an http(s) URL, the port made explicit."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return parts.scheme, (parts.hostname or "").lower(), port


def address_allowed(address: str, allow_networks: Sequence[Network]) -> bool:
    """A public address, or one inside an allowlisted network."""
    ip = ipaddress.ip_address(address.partition("%")[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if any(ip in network for network in allow_networks):
        return True
    return ip.is_global and not ip.is_multicast


class GuardedTransport(httpx.AsyncBaseTransport):
    """See the module docstring; one per origin."""

    def __init__(self, origin_url: str, settings: RemoteSettings) -> None:
        self._origin = origin_of(origin_url)
        self._allow = settings.allow_networks
        self._cap = settings.max_body_bytes
        # Never from the environment: no proxy, no .netrc, no CA bundle but the default one or
        # `ORRERY_A2A_REMOTE_CA_FILE`.
        self._inner = httpx.AsyncHTTPTransport(
            verify=_tls(settings.ca_file), trust_env=False, retries=0
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if origin_of(str(request.url)) != self._origin:
            raise RemoteAgentError(
                "insecure_url", "the remote agent named another origin than its card's"
            )
        scheme, host, port = self._origin
        # Connect to the address just checked, not to whatever the name resolves to next: the
        # Host header keeps the name, and TLS verifies the certificate for it (SNI).
        request.url = request.url.copy_with(host=await self._checked_address(host, port))
        if scheme == "https":
            request.extensions = {**request.extensions, "sni_hostname": host}
        request.headers[HOP_HEADER] = HOP_VALUE
        response = await self._inner.handle_async_request(request)
        try:
            await self._check_answer(response)
        except BaseException:
            await response.aclose()
            raise
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=_CappedStream(response, self._cap),
            extensions=response.extensions,
        )

    async def _check_answer(self, response: httpx.Response) -> None:
        """Refuse a connection to a refused peer, a redirect and an error status."""
        stream = response.extensions.get("network_stream")
        peer = stream.get_extra_info("server_addr") if stream is not None else None
        if peer is not None and not address_allowed(str(peer[0]), self._allow):
            raise RemoteAgentError(
                "address_refused", "the connection reached an address that is not allowed"
            )
        if 300 <= response.status_code < 400:
            raise RemoteAgentError(
                "redirect_refused",
                f"the remote answered a redirect ({response.status_code}); redirects are "
                "never followed",
            )
        if response.status_code >= 400:
            reason = _edge_reason(await _read_prefix(response, _REASON_BYTES))
            raise RemoteAgentError(
                "remote_refused",
                f"the remote answered HTTP {response.status_code}"
                + (f" ({reason})" if reason else ""),
                remote_reason=reason,
            )

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def _checked_address(self, host: str, port: int) -> str:
        """The first address `host` resolves to, once every one of them is allowed."""
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(
                host, port, type=socket.SOCK_STREAM
            )
        except OSError:
            raise RemoteAgentError(
                "remote_error", "the remote agent's host name does not resolve"
            ) from None
        addresses = [str(info[4][0]) for info in infos]
        if not addresses or not all(address_allowed(a, self._allow) for a in addresses):
            raise RemoteAgentError(
                "address_refused",
                "the remote agent's host resolves to a private, loopback or link-local "
                "address that ORRERY_A2A_REMOTE_ALLOW_NETWORKS does not allow",
            )
        return addresses[0]


class _CappedStream(httpx.AsyncByteStream):
    def __init__(self, response: httpx.Response, cap: int) -> None:
        self._response = response
        self._cap = cap

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = 0
        async for chunk in self._response.aiter_raw():
            seen += len(chunk)
            if seen > self._cap:
                raise RemoteAgentError(
                    "too_large", f"the remote's answer is over {self._cap} bytes"
                )
            yield chunk

    async def aclose(self) -> None:
        await self._response.aclose()


async def _read_prefix(response: httpx.Response, cap: int) -> bytes:
    """At most `cap` bytes of an error body: enough for an edge's reason code."""
    body = b""
    async for chunk in response.aiter_raw():
        body += chunk
        if len(body) >= cap:
            break
    return body[:cap]


def _edge_reason(body: bytes) -> str | None:
    """The reason code of an edge error body (`{"error": "<reason>", …}`), if it is one."""
    with contextlib.suppress(ValueError):
        data = json.loads(body)
        reason = data.get("error") if isinstance(data, dict) else None
        if isinstance(reason, str) and reason.replace("_", "").isalnum() and len(reason) <= 64:
            return reason
    return None
