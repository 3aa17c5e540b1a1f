"""What a token not verified yet may cost: a signature check, paid from two budgets.

A forged token with a published `kid` and a random signature costs authz one signature check —
about twice a cached Check (docs/benchmarks.md) — and costs its sender nothing. Envoy's budget per
client address does not bound it everywhere: the Istio overlay has none, behind an ingress or a
load balancer without trusted hops every client is the ingress's one address (so a flood spends
everyone's budget, valid callers' cached Checks included), and an IPv6 client has a /64 to rotate
through. So authz bounds the cost itself, where it is paid, just before a signature is checked:

1. **per client address** (`ORRERY_A2A_CLIENT_VERIFY_LIMIT`, 50 a second): the address Envoy
   resolved for the client — `x-envoy-external-address`, which our Envoy sets at the edge from
   the TCP peer, the trusted `x-forwarded-for` hops or the PROXY protocol header, and removes from
   what a client sends — else the Check's source address (gRPC: the peer Envoy saw; under a mesh,
   the ingress gateway's or the calling workload's). IPv6 addresses count by their /64, an
   IPv4-mapped one as IPv4; without an address every such Check shares one budget. Spent: 429
   `new_token_rate_limited` with `Retry-After`.
2. **per process** (`ORRERY_A2A_VERIFY_LIMIT`, 1000 a second): however many addresses a flood comes
   from, at most this many signature checks a second, so the process keeps CPU for what it has
   verified already. Spent: 503 `verification_busy` with `Retry-After`, at once — never a queue,
   which would make every Check behind it wait.

What never pays: a token in the verified-token cache (the common case: a caller's every Check
after its first), and a refusal authz remembers (`tokens.py`) — neither checks a signature. The
client's budget is taken first, so a client past its own budget spends none of the process's.
Both are GCRA buckets in this process (`limits.LocalLimiter`): the CPU they protect is this
process's, so each authz process (each worker) has its own.
"""

from __future__ import annotations

import ipaddress
import math
import time
from collections.abc import Callable, Mapping

from authz.errors import NewTokensLimited, VerificationBusy
from authz.limits import LocalLimiter
from authz.settings import AdmissionSettings

# Set by Envoy at the edge (use_remote_address) to the client address it trusts; a client's own
# copy is removed there (envoy/envoy.yaml). authz is asked only by Envoy.
EXTERNAL_ADDRESS_HEADER = "x-envoy-external-address"
UNKNOWN = "unknown"
_PROCESS = ""


def client_of(headers: Mapping[str, str], peer: Callable[[], str] | None) -> str:
    """The budget key of the client a Check is for: an IPv4 address, an IPv6 /64 or `unknown`."""
    text = headers.get(EXTERNAL_ADDRESS_HEADER) or (peer() if peer is not None else "")
    try:
        address = ipaddress.ip_address(text.strip())
    except ValueError:
        return UNKNOWN
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


class Admission:
    """The two signature-check budgets of one process."""

    def __init__(
        self, settings: AdmissionSettings, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._clients = LocalLimiter(settings.per_client, clock=clock)
        self._process = LocalLimiter(settings.per_process, clock=clock)

    def admit(self, client: str) -> None:
        """Take one signature check from `client`'s budget, then from the process's, or raise
        `NewTokensLimited` / `VerificationBusy`."""
        quota = self._clients.take(client)
        if not quota.allowed:
            raise NewTokensLimited(
                "too many new tokens from this client address",
                retry_after=max(1, math.ceil(quota.retry_after)),
            )
        quota = self._process.take(_PROCESS)
        if not quota.allowed:
            raise VerificationBusy(
                "authz is verifying as many new tokens as it may; retry later",
                retry_after=max(1, math.ceil(quota.retry_after)),
            )
