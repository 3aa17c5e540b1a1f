"""What the edge lets in where it runs: browser origins, the budget per client address, the heap.

These differ per deployment, and Envoy's static bootstrap has no variables, so they are read from
the environment (or `orrery-a2a envoy-config` flags) and rendered into a copy of
`envoy/envoy.yaml` by `stack.envoy_config.render`. Unset, the file's own values stand: no browser
origin (no CORS at all), 100 requests a second and 200 at once per client address, a 1 GiB heap.

* `ORRERY_A2A_CORS_ORIGINS`: origins (`scheme://host[:port]`, http or https) whose pages may call
  the card, `/a2a` and `/approvals/` from a browser, comma-separated, or `*` for any origin.
  Credentials (cookies) are never allowed, for `*` least of all: the edge takes bearer tokens.
* `ORRERY_A2A_CLIENT_RATE_LIMIT` (`N/second|minute|hour|day`) and `ORRERY_A2A_CLIENT_RATE_BURST`
  (requests at once; default: the rate's count): each client address's budget before authz.
* `ORRERY_A2A_ENVOY_MAX_HEAP` (`512MiB`, `2GiB` or bytes, at least 64 MiB): Envoy's heap budget
  for its overload manager; set it below the container's memory limit.
* `ORRERY_A2A_XFF_TRUSTED_HOPS` (0-10) or `ORRERY_A2A_PROXY_PROTOCOL` (true/false): who the client
  is when Envoy is not the first hop. Behind an L7 proxy or ingress that appends the peer to
  `X-Forwarded-For`, N trusted hops make the address N from the right the client's (the header is
  then kept, not dropped); behind an L4 load balancer that sends the PROXY protocol header, Envoy
  reads the client's address from it. Unset, the TCP peer is the client: behind either, every
  client shares one per-address budget (docs/kubernetes.md, "Behind a load balancer or an
  ingress"). At most one of the two: a hop count means nothing when the peer is read from PROXY.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from runtime.env import EnvReader, parse_rate

ANY_ORIGIN = "*"
MIN_HEAP_BYTES = 64 * 1024**2
MAX_HOPS = 10
_SIZE = re.compile(r"(\d+)\s*(KiB|MiB|GiB)?")
_SIZE_UNITS = {None: 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}
_HOST = re.compile(r"[a-z0-9.-]+|\[[0-9a-f:.]+\]")


@dataclass(frozen=True, slots=True)
class EdgePolicy:
    """`None` (and no origins) keeps what envoy/envoy.yaml says."""

    cors_origins: tuple[str, ...] = ()
    client_rate: tuple[int, int] | None = None  # (count, period in seconds)
    client_burst: int | None = None
    max_heap_bytes: int | None = None
    trusted_hops: int | None = None
    proxy_protocol: bool = False

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> EdgePolicy:
        reader = EnvReader(env)
        policy = cls.read(reader)
        reader.finish()
        return policy

    @classmethod
    def read(cls, reader: EnvReader) -> EdgePolicy:
        """Read with `reader`, which collects the problems (settings that read more report all
        of them at once)."""
        none: tuple[str, ...] = ()
        origins = reader.parsed("ORRERY_A2A_CORS_ORIGINS", "", parse_origins, none)
        rate = None
        if reader.raw("ORRERY_A2A_CLIENT_RATE_LIMIT"):
            rate = reader.parsed("ORRERY_A2A_CLIENT_RATE_LIMIT", "", parse_rate, None)
        burst = None
        if reader.raw("ORRERY_A2A_CLIENT_RATE_BURST"):
            burst = reader.integer("ORRERY_A2A_CLIENT_RATE_BURST", 1, minimum=1, maximum=1_000_000)
        elif rate is not None:
            burst = rate[0]
        heap = None
        if reader.raw("ORRERY_A2A_ENVOY_MAX_HEAP"):
            heap = reader.parsed("ORRERY_A2A_ENVOY_MAX_HEAP", "", parse_heap, None)
        hops = None
        if reader.raw("ORRERY_A2A_XFF_TRUSTED_HOPS"):
            hops = reader.integer("ORRERY_A2A_XFF_TRUSTED_HOPS", 0, minimum=0, maximum=MAX_HOPS)
        proxy_protocol = reader.boolean("ORRERY_A2A_PROXY_PROTOCOL", False)
        if hops and proxy_protocol:
            reader.problem(
                "ORRERY_A2A_XFF_TRUSTED_HOPS",
                "give trusted hops or ORRERY_A2A_PROXY_PROTOCOL, not both",
            )
        return cls(origins, rate, burst, heap, hops, proxy_protocol)


def parse_origins(text: str) -> tuple[str, ...]:
    """`https://a.example, http://127.0.0.1:5173` → normalised origins; `*` alone → ("*",)."""
    entries = [entry.strip() for entry in text.split(",") if entry.strip()]
    if ANY_ORIGIN in entries:
        if len(entries) > 1:
            raise ValueError("`*` allows every origin; list origins or give `*` alone")
        return (ANY_ORIGIN,)
    return tuple(dict.fromkeys(_origin(entry) for entry in entries))


def _origin(text: str) -> str:
    """An origin as a browser sends it (RFC 6454): scheme, host and a port, nothing else."""
    parts = urlsplit(text)
    try:
        port = parts.port
    except ValueError:
        port = -1
    host = parts.netloc.rsplit(":", 1)[0] if port is not None else parts.netloc
    if (
        port == -1
        or parts.scheme.lower() not in ("http", "https")
        or not _HOST.fullmatch(host.lower())
        or parts.path
        or parts.query
        or parts.fragment
        or "@" in parts.netloc
    ):
        raise ValueError(f"expected origins like https://console.example or *, got {text!r}")
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}"


def parse_heap(text: str) -> int:
    """`512MiB`, `2GiB`, `1048576` → bytes, at least 64 MiB."""
    match = _SIZE.fullmatch(text.strip())
    if not match:
        raise ValueError(f"expected a size like 512MiB or 2GiB, got {text!r}")
    size = int(match[1]) * _SIZE_UNITS[match[2]]
    if size < MIN_HEAP_BYTES:
        raise ValueError("must be at least 64MiB")
    return size
