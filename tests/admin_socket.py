"""Envoy's admin API of a local stack, in tests: a Unix socket in the state directory, not a port
(stack/envoy_config.py), so an HTTP client needs the socket as its transport."""

from __future__ import annotations

from pathlib import Path

import httpx


def admin_client(socket_path: str | Path, *, timeout: float = 5.0) -> httpx.AsyncClient:
    """A client whose requests (`get("/ready")`) go to the admin API on `socket_path`."""
    return httpx.AsyncClient(
        transport=httpx.AsyncHTTPTransport(uds=str(socket_path)),
        base_url="http://envoy-admin",
        timeout=timeout,
    )
