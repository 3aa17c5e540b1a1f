"""Everything authz reads from the environment, validated once, frozen, passed explicitly.

`AuthzSettings.from_env(env)` is the only place that looks at environment variables. Each part of
the request path gets the narrow slice it needs (`TokenRules`, `JwksSettings`, `RoleRules`,
`RateLimitSettings`), so a reviewer can see what a module can depend on from its signature.
Every bad variable is reported in one `ConfigError` (see `runtime.env`); secret values are never
echoed in it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from authz.principal import RoleRules
from contract.assertion import AssertionKeys
from contract.identity import DEFAULT_ROLE_AUTONOMY, is_identifier, parse_role_autonomy
from runtime.env import EnvReader, is_loopback_url, parse_rate

# Asymmetric JWS algorithms we can verify (RFC 7518 §3, RFC 8037). HMAC and `none` are absent on
# purpose: a shared secret would let anyone who can verify tokens also mint them.
SUPPORTED_ALGORITHMS: frozenset[str] = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)
DEFAULT_ALGORITHMS = "RS256,PS256,ES256,EdDSA"
# Pinned by docs/contract.md#bearer-tokens: clock leeway for exp/nbf/iat.
LEEWAY_SECONDS = 60


FailureMode = Literal["local", "deny"]


@dataclass(frozen=True, slots=True)
class TokenRules:
    """What a bearer token must satisfy besides its signature."""

    issuer: str
    audience: str
    console_audience: str
    algorithms: frozenset[str]
    max_lifetime: int
    leeway: int = LEEWAY_SECONDS
    # The OAuth clients a person decides approvals through; none: nobody is a human.
    console_clients: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class JwksSettings:
    """Where verification keys come from and how long stale keys may be trusted."""

    url: str | None
    file: Path | None
    refresh: float
    cooldown: float
    stale: float
    timeout: float

    @property
    def retry(self) -> float:
        """After a failed load, try again sooner than the regular refresh."""
        return min(self.refresh, 10.0)


@dataclass(frozen=True, slots=True)
class RateLimitSettings:
    """Per-subject rate: `rate` requests per `period` seconds, up to `burst` at once."""

    rate: int
    period: int
    burst: int
    max_subjects: int
    redis_url: str | None
    redis_timeout: float
    redis_retry: float
    failure_mode: FailureMode

    @property
    def policy(self) -> str:
        """The IETF `RateLimit-Policy` value (draft-ietf-httpapi-ratelimit-headers)."""
        return f'"subject";q={self.rate};w={self.period}'


@dataclass(frozen=True, slots=True)
class Budget:
    """`rate` per `period` seconds, up to `burst` at once, kept for at most `max_subjects` keys
    (a GCRA bucket, `limits.LocalLimiter`)."""

    rate: int
    period: int
    burst: int
    max_subjects: int


# Client addresses whose signature-check budget is remembered (least recently used forgotten
# first: a forgotten one starts full again, which the per-process budget still bounds).
ADMISSION_CLIENTS = 10_000


@dataclass(frozen=True, slots=True)
class AdmissionSettings:
    """What a token not verified yet may cost (`admission.py`): its signature check is paid
    from its client address's budget, then from this process's."""

    per_client: Budget
    per_process: Budget


DEFAULT_ADMISSION = AdmissionSettings(
    per_client=Budget(50, 1, 50, ADMISSION_CLIENTS), per_process=Budget(1000, 1, 1000, 1)
)


@dataclass(frozen=True, slots=True)
class AuthzSettings:
    """The whole configuration of one authz process."""

    addr: tuple[str, int]
    diag_addr: tuple[str, int]
    tokens: TokenRules
    jwks: JwksSettings
    roles: RoleRules
    assertion_keys: AssertionKeys
    token_cache_size: int
    limits: RateLimitSettings
    log_level: str
    # Where the HTTP ext_authz transport listens (`http_transport.py`); None: gRPC only. It
    # closes a connection idle this long, and accepts at most this many at once.
    http_addr: tuple[str, int] | None = None
    http_idle_timeout: float = 300.0
    http_max_connections: int = 1024
    admission: AdmissionSettings = DEFAULT_ADMISSION

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> AuthzSettings:
        """Build and validate; raise one `ConfigError` naming every bad variable."""
        read = EnvReader(env)
        settings = cls(
            addr=read.address("ORRERY_A2A_AUTHZ_ADDR", "127.0.0.1:9191"),
            diag_addr=read.address("ORRERY_A2A_AUTHZ_DIAG_ADDR", "127.0.0.1:9192"),
            tokens=_token_rules(read),
            jwks=_jwks_settings(read),
            roles=RoleRules(
                claim=read.string("ORRERY_A2A_ROLE_CLAIM", "roles"),
                autonomy=read.parsed(
                    "ORRERY_A2A_ROLE_AUTONOMY", DEFAULT_ROLE_AUTONOMY, parse_role_autonomy, ()
                ),
                scope_fallback=read.boolean("ORRERY_A2A_ROLE_SCOPE_FALLBACK"),
            ),
            assertion_keys=_assertion_keys(read),
            token_cache_size=read.integer("ORRERY_A2A_TOKEN_CACHE_SIZE", 10_000, maximum=1_000_000),
            limits=_rate_limit_settings(read),
            log_level=read.log_level("ORRERY_A2A_LOG_LEVEL"),
            http_addr=(
                read.address("ORRERY_A2A_AUTHZ_HTTP_ADDR", "")
                if read.raw("ORRERY_A2A_AUTHZ_HTTP_ADDR")
                else None
            ),
            http_idle_timeout=read.seconds(
                "ORRERY_A2A_AUTHZ_HTTP_IDLE_TIMEOUT", "300s", minimum=0.05
            ),
            http_max_connections=read.integer(
                "ORRERY_A2A_AUTHZ_HTTP_MAX_CONNECTIONS", 1024, minimum=1, maximum=1_000_000
            ),
            admission=AdmissionSettings(
                per_client=_budget(
                    read, "ORRERY_A2A_CLIENT_VERIFY_LIMIT", "50/second", ADMISSION_CLIENTS
                ),
                per_process=_budget(read, "ORRERY_A2A_VERIFY_LIMIT", "1000/second", 1),
            ),
        )
        read.finish()
        return settings


def _budget(read: EnvReader, name: str, default: str, keys: int) -> Budget:
    """`N/second|minute|hour|day`: N signature checks per period, N at once."""
    rate, period = read.parsed(name, default, parse_rate, (1, 1))
    return Budget(rate, period, rate, keys)


def _token_rules(read: EnvReader) -> TokenRules:
    issuer = read.string("ORRERY_A2A_JWT_ISSUER", required=True)
    audience = read.string("ORRERY_A2A_JWT_AUDIENCE", required=True)
    console = read.string("ORRERY_CONSOLE_JWT_AUDIENCE", required=True)
    if audience and audience == console:
        # One audience for both surfaces would let a machine token act as a human on approvals.
        read.problem("ORRERY_CONSOLE_JWT_AUDIENCE", "must differ from ORRERY_A2A_JWT_AUDIENCE")
    lifetime = read.seconds("ORRERY_A2A_JWT_MAX_LIFETIME", "24h", minimum=1)
    return TokenRules(
        issuer=issuer,
        audience=audience,
        console_audience=console,
        algorithms=read.parsed(
            "ORRERY_A2A_JWT_ALGORITHMS", DEFAULT_ALGORITHMS, parse_algorithms, frozenset()
        ),
        max_lifetime=int(lifetime),
        console_clients=read.parsed(
            "ORRERY_CONSOLE_CLIENTS", "", parse_console_clients, frozenset()
        ),
    )


def _jwks_settings(read: EnvReader) -> JwksSettings:
    url = read.raw("ORRERY_A2A_JWKS_URL") or None
    file = read.raw("ORRERY_A2A_JWKS_FILE") or None
    if bool(url) == bool(file):
        read.problem(
            "ORRERY_A2A_JWKS_URL",
            "set exactly one of ORRERY_A2A_JWKS_URL and ORRERY_A2A_JWKS_FILE",
        )
    if url is not None:
        parts = urlsplit(url)
        if parts.scheme != "https" and not (parts.scheme == "http" and is_loopback_url(url)):
            read.problem("ORRERY_A2A_JWKS_URL", "must be https (plain http only for loopback)")
        elif not parts.hostname or parts.username or parts.password:
            read.problem("ORRERY_A2A_JWKS_URL", "must be an absolute URL without credentials")
    return JwksSettings(
        url=url,
        file=Path(file) if file else None,
        refresh=read.seconds("ORRERY_A2A_JWKS_REFRESH", "5m" if url else "1s", minimum=0.05),
        # At least 1 s: without a cooldown, a stream of unknown kids is a stream of fetches.
        cooldown=read.seconds("ORRERY_A2A_JWKS_COOLDOWN", "30s", minimum=1),
        stale=read.seconds("ORRERY_A2A_JWKS_STALE", "1h", minimum=0.1),
        timeout=read.seconds("ORRERY_A2A_JWKS_TIMEOUT", "2s", minimum=0.05),
    )


def _assertion_keys(read: EnvReader) -> AssertionKeys:
    name = "ORRERY_A2A_ASSERTION_KEYS"
    if not read.raw(name):
        read.problem(name, "is required")
        return AssertionKeys(())
    return read.parsed(name, "", AssertionKeys.parse, AssertionKeys(()))


def _rate_limit_settings(read: EnvReader) -> RateLimitSettings:
    rate, period = read.parsed("ORRERY_A2A_RATE_LIMIT", "60/minute", parse_rate, (60, 60))
    mode = read.string("ORRERY_A2A_REDIS_FAILURE_MODE", "local")
    if mode not in ("local", "deny"):
        read.problem("ORRERY_A2A_REDIS_FAILURE_MODE", f"expected local or deny, got {mode!r}")
        mode = "local"
    redis_url = read.redis_url("ORRERY_A2A_REDIS_URL")
    return RateLimitSettings(
        rate=rate,
        period=period,
        burst=read.integer("ORRERY_A2A_RATE_BURST", rate, minimum=1, maximum=1_000_000_000),
        max_subjects=read.integer(
            "ORRERY_A2A_RATE_LIMIT_SUBJECTS", 100_000, minimum=1, maximum=10_000_000
        ),
        redis_url=redis_url,
        redis_timeout=read.seconds("ORRERY_A2A_REDIS_TIMEOUT", "100ms", minimum=0.001),
        redis_retry=read.seconds("ORRERY_A2A_REDIS_RETRY", "1s", minimum=0.01),
        failure_mode="deny" if mode == "deny" else "local",
    )


def parse_algorithms(text: str) -> frozenset[str]:
    """`RS256,ES256,…`: only asymmetric algorithms we can verify; names are case-sensitive."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    bad = sorted(set(names) - SUPPORTED_ALGORITHMS)
    if bad:
        raise ValueError(
            f"unsupported algorithm(s) {', '.join(bad)} "
            f"(asymmetric only: {', '.join(sorted(SUPPORTED_ALGORITHMS))})"
        )
    if not names:
        raise ValueError("no algorithms listed")
    return frozenset(names)


def parse_console_clients(text: str) -> frozenset[str]:
    """`console[,admin-ui…]`: the client ids (`client_id` / `azp`) of the console apps."""
    clients = frozenset(name.strip() for name in text.split(",") if name.strip())
    if not clients:
        raise ValueError(
            "is required: the client ids of the console apps through which people decide"
            " approvals (client_id / azp)"
        )
    bad = sorted(name for name in clients if not is_identifier(name))
    if bad:
        raise ValueError(f"not client ids: {', '.join(map(repr, bad))}")
    return clients
