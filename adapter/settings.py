"""Adapter settings: one frozen object built from the environment, passed explicitly.

`AdapterSettings.from_env(env)` reads every variable the adapter uses
(docs/contract.md#adapter-variables), reports every bad one at once through `EnvReader`, and never
echoes a secret. Nothing else in the package reads `os.environ`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from adapter.card_signing import CardSigningKey, parse_key_files
from adapter.messages import MAX_BODY_BYTES
from contract.assertion import AssertionKeys
from contract.identity import DEFAULT_ROLE_AUTONOMY, parse_role_autonomy
from runtime.addresses import Address
from runtime.env import EnvReader, is_loopback_url

DEFAULT_ADDR = "127.0.0.1:8081"
DEFAULT_PUBLIC_URL = "http://127.0.0.1:8080/a2a"
DEFAULT_SCHEMA = "orrery_a2a"
_SCHEMA = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_GATEWAY = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")
# RFC 6749 §3.3 scope-token: printable ASCII but space, `"` and `\`.
_SCOPE = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]+")


@dataclass(frozen=True, slots=True)
class CardAuth:
    """What the agent card says about getting in (docs/contract.md#agent-cards): the roles a
    token needs one of, and where a token comes from when the operator names it."""

    roles: tuple[str, ...]
    oidc_discovery_url: str | None = None
    oauth_token_url: str | None = None
    scopes: tuple[str, ...] = ()


PUBLIC_PATHS = ("/a2a", "/a2a/")


def _public_url(text: str) -> str:
    """The URL clients reach the edge's A2A endpoint at. Its path must be Envoy's `/a2a`: the
    agent card, `approve_url` and the card keys' `jku` all hang off its origin, so a different
    path (a proxy's prefix) would advertise URLs that lead nowhere."""
    parts = urlsplit(text)
    if "@" in parts.netloc:
        raise ValueError("must not carry credentials")  # and is not echoed: it holds one
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"expected an absolute http(s) URL, got {text!r}")
    if parts.scheme == "http" and not is_loopback_url(text):
        raise ValueError("must be https outside loopback")
    if parts.query or parts.fragment:
        raise ValueError("must not carry a query or fragment")
    if parts.path not in PUBLIC_PATHS:
        raise ValueError(
            f"its path must be /a2a, got {parts.path or '/'!r} (the edge serves A2A at /a2a; the"
            " agent card and approval URLs hang off the URL's origin)"
        )
    return text


def _idp_url(text: str) -> str:
    """An identity provider's URL the card names: https (plain http only on loopback)."""
    parts = urlsplit(text)
    if "@" in parts.netloc:
        raise ValueError("must not carry credentials")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"expected an absolute https URL, got {text!r}")
    if parts.scheme == "http" and not is_loopback_url(text):
        raise ValueError("must be https outside loopback")
    if parts.fragment:
        raise ValueError("must not carry a fragment")
    return text


def _scopes(text: str) -> tuple[str, ...]:
    scopes = tuple(dict.fromkeys(text.split()))
    bad = [scope for scope in scopes if not _SCOPE.fullmatch(scope)]
    if bad:
        raise ValueError(f"not OAuth scope tokens: {bad}")
    return scopes


def _card_auth(reader: EnvReader) -> CardAuth:
    roles: tuple[tuple[str, str], ...] = reader.parsed(
        "ORRERY_A2A_ROLE_AUTONOMY", DEFAULT_ROLE_AUTONOMY, parse_role_autonomy, ()
    )
    oidc = _optional(reader, "ORRERY_A2A_OIDC_DISCOVERY_URL", _idp_url)
    token_url = _optional(reader, "ORRERY_A2A_OAUTH_TOKEN_URL", _idp_url)
    no_scopes: tuple[str, ...] = ()
    scopes = reader.parsed("ORRERY_A2A_TOKEN_SCOPES", "", _scopes, no_scopes)
    if (oidc or token_url) and not scopes:
        # The card's requirement lists them, and an empty list has no canonical form every
        # verifier agrees on (adapter/card_signing.py).
        reader.problem(
            "ORRERY_A2A_TOKEN_SCOPES",
            "name the scopes a client requests, with ORRERY_A2A_OIDC_DISCOVERY_URL or"
            " ORRERY_A2A_OAUTH_TOKEN_URL",
        )
    return CardAuth(
        roles=tuple(role for role, _ in roles),
        oidc_discovery_url=oidc,
        oauth_token_url=token_url,
        scopes=scopes,
    )


def _database_url(text: str) -> str:
    if urlsplit(text).scheme not in ("postgres", "postgresql"):
        # Never echo the value: it usually carries a password.
        raise ValueError("expected a postgresql:// URL")
    return text


def _schema(text: str) -> str:
    if not _SCHEMA.fullmatch(text):
        raise ValueError("expected a lower-case SQL identifier ([a-z_][a-z0-9_]*)")
    return text


def _gateway(text: str) -> str:
    if not _GATEWAY.fullmatch(text):
        raise ValueError(f"expected module:factory, got {text!r}")
    return text


def _keys(text: str) -> AssertionKeys | None:
    return AssertionKeys.parse(text)


def _optional(reader: EnvReader, name: str, parse: Callable[[str], str]) -> str | None:
    """An optional variable: absent or empty is None, present must parse."""
    if not reader.raw(name):
        return None
    return reader.parsed(name, "", parse, None)


def _diag_address(reader: EnvReader) -> Address | None:
    """`ORRERY_A2A_ADAPTER_DIAG_ADDR`, if set; never the A2A address itself."""
    if not reader.raw("ORRERY_A2A_ADAPTER_DIAG_ADDR"):
        return None
    diag = reader.address("ORRERY_A2A_ADAPTER_DIAG_ADDR", "127.0.0.1:0")
    if diag[1] != 0 and diag == reader.address("ORRERY_A2A_ADAPTER_ADDR", DEFAULT_ADDR):
        reader.problem("ORRERY_A2A_ADAPTER_DIAG_ADDR", "must differ from ORRERY_A2A_ADAPTER_ADDR")
    return diag


@dataclass(frozen=True, slots=True)
class AdapterSettings:
    """Everything the adapter needs to run; built once at start-up."""

    addr: tuple[str, int]
    assertion_keys: AssertionKeys
    public_url: str
    max_in_flight: int
    max_subscriptions: int
    redis_url: str | None
    gateway: str | None
    database_url: str | None
    db_schema: str
    multi_replica: bool
    max_body_bytes: int
    approval_ttl: float
    task_idle_ttl: float
    max_tasks: int
    max_tasks_per_owner: int
    max_approvals: int
    max_pending_approvals_per_owner: int
    shutdown_grace: float
    sse_keepalive: float
    turn_deadline: float
    log_level: str
    card_auth: CardAuth
    card_signing_keys: tuple[CardSigningKey, ...] = ()
    # Opt-in: `/healthz`, `/readyz`, `/metrics` on an address of their own (a pod's probes and
    # scrapes), and then no longer on the A2A socket.
    diag_addr: Address | None = None
    # On SIGTERM, how long to keep serving while `/readyz` already fails, so a load balancer that
    # health-checks several replicas (Envoy: every second) takes this one out before it stops
    # listening: no request is sent to a socket that is closing.
    drain_delay: float = 0.0

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> AdapterSettings:
        """Build the settings or raise one `ConfigError` naming every bad variable."""
        reader = EnvReader(env)
        keys = None
        if reader.string("ORRERY_A2A_ASSERTION_KEYS", required=True):
            keys = reader.parsed("ORRERY_A2A_ASSERTION_KEYS", "", _keys, None)
        database_url = _optional(reader, "DATABASE_URL", _database_url)
        redis_url = reader.redis_url("ORRERY_A2A_REDIS_URL")
        gateway = _optional(reader, "ORRERY_A2A_GATEWAY", _gateway)
        multi_replica = reader.boolean("ORRERY_MULTI_REPLICA")
        if multi_replica:
            if not reader.raw("DATABASE_URL"):
                reader.problem(
                    "DATABASE_URL",
                    "ORRERY_MULTI_REPLICA=true needs a shared store for tasks and approvals",
                )
            if not reader.raw("ORRERY_A2A_REDIS_URL"):
                reader.problem(
                    "ORRERY_A2A_REDIS_URL",
                    "ORRERY_MULTI_REPLICA=true needs a shared in-flight counter",
                )
        settings = cls(
            addr=reader.address("ORRERY_A2A_ADAPTER_ADDR", DEFAULT_ADDR),
            assertion_keys=keys,  # type: ignore[arg-type]  # None only when finish() raises
            public_url=reader.parsed(
                "ORRERY_A2A_PUBLIC_URL", DEFAULT_PUBLIC_URL, _public_url, DEFAULT_PUBLIC_URL
            ),
            max_in_flight=reader.integer("ORRERY_A2A_MAX_IN_FLIGHT", 4, minimum=1, maximum=1000),
            max_subscriptions=reader.integer(
                "ORRERY_A2A_MAX_SUBSCRIPTIONS", 8, minimum=1, maximum=1000
            ),
            redis_url=redis_url,
            gateway=gateway,
            database_url=database_url,
            db_schema=reader.parsed(
                "ORRERY_A2A_DB_SCHEMA", DEFAULT_SCHEMA, _schema, DEFAULT_SCHEMA
            ),
            multi_replica=multi_replica,
            # Never below the body of the longest legal message in the worst escaping.
            max_body_bytes=reader.integer(
                "ORRERY_A2A_MAX_BODY_BYTES",
                MAX_BODY_BYTES,
                minimum=MAX_BODY_BYTES,
                maximum=16 * 1024 * 1024,
            ),
            approval_ttl=reader.seconds("ORRERY_A2A_APPROVAL_TTL", "15m", minimum=1.0),
            task_idle_ttl=reader.seconds("ORRERY_A2A_TASK_IDLE_TTL", "1h", minimum=1.0),
            max_tasks=reader.integer("ORRERY_A2A_MAX_TASKS", 10000, minimum=1),
            # One owner's share of the memory stores: its flood cannot push out others' tasks.
            max_tasks_per_owner=reader.integer("ORRERY_A2A_MAX_TASKS_PER_OWNER", 1000, minimum=1),
            max_approvals=reader.integer("ORRERY_A2A_MAX_APPROVALS", 10000, minimum=1),
            max_pending_approvals_per_owner=reader.integer(
                "ORRERY_A2A_MAX_PENDING_APPROVALS_PER_OWNER", 100, minimum=1
            ),
            shutdown_grace=reader.seconds("ORRERY_A2A_SHUTDOWN_GRACE", "10s"),
            # Proxies close a silent stream (Envoy: 300 s); a comment line every interval keeps
            # a stream that waits on a slow turn open. Well below any proxy's idle timeout.
            sse_keepalive=reader.seconds("ORRERY_A2A_SSE_KEEPALIVE", "15s", minimum=0.1),
            # A turn (the gateway call) longer than this ends FAILED `turn_deadline` and frees
            # its slot. Below Envoy's 300 s stream idle timeout, so a blocking SendMessage hears
            # its task's end instead of a 504 from the proxy.
            turn_deadline=reader.seconds("ORRERY_A2A_TURN_DEADLINE", "2m", minimum=0.1),
            log_level=reader.log_level("ORRERY_A2A_LOG_LEVEL"),
            card_auth=_card_auth(reader),
            card_signing_keys=(
                reader.parsed("ORRERY_A2A_CARD_SIGNING_KEYS", "", parse_key_files, ())
                if reader.raw("ORRERY_A2A_CARD_SIGNING_KEYS")
                else ()
            ),
            diag_addr=_diag_address(reader),
            drain_delay=reader.seconds("ORRERY_A2A_DRAIN_DELAY", "0s"),
        )
        reader.finish()
        return settings

    @property
    def shared_stores(self) -> bool:
        """True when tasks and approvals live in PostgreSQL (visible to every replica)."""
        return self.database_url is not None
