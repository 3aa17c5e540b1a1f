"""`ORRERY_A2A_REMOTE_AGENTS` and its companions: which remote agents a gateway may call, how.

The allowlist is the only way to name a remote agent: `name=card URL` pairs, comma-separated
(`ORRERY_A2A_REMOTE_AGENTS=billing=https://billing.example.com/.well-known/agent-card.json`). A
name is what the agent (and the person approving) sees; the URL is where its card is fetched.
Each agent's own settings are variables named after it (`billing` → `ORRERY_A2A_REMOTE_BILLING_*`):

* `_TOKEN_FILE`: the outbound bearer token, read from this file (re-read when it changes), or
* `_TOKEN_URL` + `_CLIENT_ID` + `_CLIENT_SECRET_FILE` (+ `_AUDIENCE`, `_SCOPE`): an OAuth token
  endpoint, with `_GRANT=client_credentials` (the default) or `_GRANT=token_exchange` (RFC 8693:
  the token in `_SUBJECT_TOKEN_FILE` exchanged for one for the remote's audience, with this
  platform's own token in `_ACTOR_TOKEN_FILE` as the actor, so the issued token carries `act`);
  none of them: no `Authorization` header at all;
* `_CARD_KEYS`: JWK thumbprints (RFC 7638) of which one must have signed the card; without it a
  signed card is still verified, an unsigned one accepted.

Bounds shared by every agent: `ORRERY_A2A_REMOTE_TIMEOUT` (a whole call), `_MAX_BODY_BYTES` (any
response body), `_MAX_CALLS_PER_PRINCIPAL` (calls running at once for one principal), and
`_ALLOW_NETWORKS`: the CIDRs where a private, loopback or link-local address is allowed (none by
default). `_CA_FILE` replaces the default CA bundle for every remote's TLS (a private CA). Built
once, frozen; every bad variable is named in one `ConfigError`.
"""

from __future__ import annotations

import ipaddress
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from runtime.addresses import is_loopback_host
from runtime.env import EnvReader

AGENTS_VARIABLE = "ORRERY_A2A_REMOTE_AGENTS"
PREFIX = "ORRERY_A2A_REMOTE_"
_NAME = re.compile(r"[a-z][a-z0-9-]{0,31}")
_THUMBPRINT = re.compile(r"[A-Za-z0-9_-]{43}")
GRANTS = ("client_credentials", "token_exchange")

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True, slots=True)
class TokenEndpoint:
    """An OAuth 2.0 token endpoint and the grant asked there (`GRANTS`)."""

    url: str
    client_id: str
    client_secret_file: Path
    audience: str | None
    scope: str | None
    grant: str = "client_credentials"
    subject_token_file: Path | None = None
    actor_token_file: Path | None = None


@dataclass(frozen=True, slots=True)
class RemoteAgent:
    """One allowlisted remote agent."""

    name: str
    card_url: str
    token_file: Path | None = None
    token_endpoint: TokenEndpoint | None = None
    card_keys: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class RemoteSettings:
    """Every remote agent a gateway may call, and the bounds on calling them."""

    agents: Mapping[str, RemoteAgent]
    allow_networks: tuple[Network, ...] = ()
    timeout: float = 30.0
    max_body_bytes: int = 256 * 1024
    max_calls_per_principal: int = 2
    ca_file: Path | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> RemoteSettings:
        """Build the settings or raise one `ConfigError` naming every bad variable."""
        reader = EnvReader(env)
        empty: dict[str, str] = {}
        pairs = reader.parsed(AGENTS_VARIABLE, "", _pairs, empty)
        agents = {name: _agent(reader, name, url) for name, url in pairs.items()}
        settings = cls(
            agents=agents,
            allow_networks=reader.parsed(f"{PREFIX}ALLOW_NETWORKS", "", _networks, ()),
            timeout=reader.seconds(f"{PREFIX}TIMEOUT", "30s", minimum=0.1),
            max_body_bytes=reader.integer(
                f"{PREFIX}MAX_BODY_BYTES", 256 * 1024, minimum=1024, maximum=16 * 1024 * 1024
            ),
            max_calls_per_principal=reader.integer(
                f"{PREFIX}MAX_CALLS_PER_PRINCIPAL", 2, minimum=1, maximum=100
            ),
            ca_file=reader.parsed(f"{PREFIX}CA_FILE", "", _ca_file, None),
        )
        reader.finish()
        return settings


def variable(name: str, suffix: str) -> str:
    """The variable of one agent's setting: `billing-eu`, `TOKEN_FILE` →
    `ORRERY_A2A_REMOTE_BILLING_EU_TOKEN_FILE`."""
    return f"{PREFIX}{name.upper().replace('-', '_')}_{suffix}"


def remote_url(text: str) -> str:
    """A card or token endpoint URL: https, or http on a loopback host; no user info, query or
    fragment."""
    parts = urlsplit(text)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise ValueError(f"{text!r} is not an http(s) URL")
    if parts.scheme == "http" and not is_loopback_host(parts.hostname):
        raise ValueError(f"{text!r}: https is required outside loopback")
    if parts.username or parts.password or parts.query or parts.fragment:
        raise ValueError(f"{text!r}: no user info, query or fragment")
    return text


def _pairs(text: str) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, equals, url = item.partition("=")
        name = name.strip()
        if not equals or not _NAME.fullmatch(name):
            raise ValueError(
                f"expected name=card-url pairs, comma-separated, each name lower-case letters, "
                f"digits and '-' (at most 32); got {item!r}"
            )
        if name in pairs:
            raise ValueError(f"{name!r} is listed twice")
        pairs[name] = remote_url(url.strip())
    return pairs


def _networks(text: str) -> tuple[Network, ...]:
    try:
        return tuple(ipaddress.ip_network(item.strip()) for item in text.split(",") if item.strip())
    except ValueError:
        raise ValueError(
            f"expected comma-separated CIDRs such as 10.0.0.0/8, got {text!r}"
        ) from None


def _ca_file(text: str) -> Path | None:
    if not text:
        return None
    try:
        ssl.create_default_context(cafile=text)
    except (OSError, ssl.SSLError):
        raise ValueError(f"{text!r} is not a readable file of PEM certificates") from None
    return Path(text)


def _thumbprints(text: str) -> frozenset[str]:
    keys = frozenset(item.strip() for item in text.split(",") if item.strip())
    bad = sorted(key for key in keys if not _THUMBPRINT.fullmatch(key))
    if bad:
        raise ValueError(f"not RFC 7638 SHA-256 thumbprints (43 base64url characters): {bad}")
    return keys


def _agent(reader: EnvReader, name: str, url: str) -> RemoteAgent:
    token_file = reader.raw(variable(name, "TOKEN_FILE")) or None
    token_url = reader.raw(variable(name, "TOKEN_URL")) or None
    endpoint = None
    if token_file and token_url:
        reader.problem(
            variable(name, "TOKEN_URL"), f"set only one of it and {variable(name, 'TOKEN_FILE')}"
        )
    elif token_url:
        grant = reader.string(variable(name, "GRANT"), "client_credentials")
        if grant not in GRANTS:
            reader.problem(variable(name, "GRANT"), f"expected one of {', '.join(GRANTS)}")
        exchange = grant == "token_exchange"
        subject = reader.string(variable(name, "SUBJECT_TOKEN_FILE"), required=exchange)
        actor = reader.raw(variable(name, "ACTOR_TOKEN_FILE"))
        endpoint = TokenEndpoint(
            url=reader.parsed(variable(name, "TOKEN_URL"), "", remote_url, ""),
            client_id=reader.string(variable(name, "CLIENT_ID"), required=True),
            client_secret_file=Path(
                reader.string(variable(name, "CLIENT_SECRET_FILE"), required=True)
            ),
            audience=reader.raw(variable(name, "AUDIENCE")) or None,
            scope=reader.raw(variable(name, "SCOPE")) or None,
            grant=grant,
            subject_token_file=Path(subject) if exchange and subject else None,
            actor_token_file=Path(actor) if exchange and actor else None,
        )
    return RemoteAgent(
        name=name,
        card_url=url,
        token_file=Path(token_file) if token_file else None,
        token_endpoint=endpoint,
        card_keys=reader.parsed(variable(name, "CARD_KEYS"), "", _thumbprints, frozenset()),
    )
