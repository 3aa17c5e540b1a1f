"""Addresses as processes configure, bind and report them."""

from __future__ import annotations

import socket

import pytest

from runtime.addresses import (
    address_family,
    format_address,
    is_ipv6,
    is_loopback_host,
    parse_address,
)


@pytest.mark.parametrize(
    ("address", "text"),
    [(("127.0.0.1", 9191), "127.0.0.1:9191"), (("::1", 0), "[::1]:0"), (("authz", 80), "authz:80")],
)
def test_format_and_parse_are_inverse(address: tuple[str, int], text: str) -> None:
    """An IPv6 host is bracketed, and parsing the text gives the address back."""
    assert format_address(address) == text
    assert parse_address(text) == address


@pytest.mark.parametrize(("host", "ipv6"), [("::1", True), ("::", True), ("10.0.0.1", False)])
def test_ipv6_hosts_get_the_ipv6_family(host: str, ipv6: bool) -> None:
    """Only an IPv6 literal needs an AF_INET6 socket."""
    assert is_ipv6(host) is ipv6
    assert address_family(host) == (socket.AF_INET6 if ipv6 else socket.AF_INET)


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("localhost", False),
        ("10.0.0.1", False),
    ],
)
def test_only_loopback_literals_are_loopback_hosts(host: str, loopback: bool) -> None:
    """A name, `localhost` included, is never taken for loopback: it could resolve elsewhere."""
    assert is_loopback_host(host) is loopback
