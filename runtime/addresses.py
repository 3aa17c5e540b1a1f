"""Socket addresses as the processes configure, bind and report them: `host:port`, IPv6 in
brackets (`[::1]:8081`), port 0 for "any free port"."""

from __future__ import annotations

import ipaddress
import socket

Address = tuple[str, int]


def parse_address(text: str) -> Address:
    """`host:port` or `[v6]:port` → (host without brackets, port); `ValueError` names the text."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"expected host:port, got {text!r}")
    return host.strip("[]"), int(port)


def format_address(address: Address) -> str:
    """The inverse of `parse_address`: brackets around an IPv6 host."""
    host, port = address
    return f"[{host}]:{port}" if is_ipv6(host) else f"{host}:{port}"


def is_ipv6(host: str) -> bool:
    """True for an IPv6 literal (only those contain a colon; names and IPv4 never do)."""
    return ":" in host


def address_family(host: str) -> socket.AddressFamily:
    """The family a socket bound to `host` needs."""
    return socket.AF_INET6 if is_ipv6(host) else socket.AF_INET


def is_loopback_host(host: str) -> bool:
    """True for a literal loopback address (127.0.0.0/8, ::1); names, `localhost` included, are
    not: what a name resolves to is not ours to decide."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
