"""Prometheus metrics: one registry per process, passed explicitly (no module-level globals).

Names (all prefixed `orrery_authz_`):

* `decisions_total{decision, reason}` — every Check: decision `allow`/`deny`/`error`, reason
  the stable reason code (`ok` on allow, `internal_error` for a bug).
* `check_duration_seconds` — histogram of the time spent inside Check (decision + response).
* `token_cache_total{result}` — `hit`/`miss` of the verified-token cache; hit ratio =
  `rate(…{result="hit"}[5m]) / rate(…[5m])` summed over results.
* `token_refusals_remembered_total` — bad signatures and expired tokens refused again from
  memory, without another signature check (a repeated forgery shows up here).
* `jwks_refresh_total{outcome}` — `updated`/`unchanged`/`error` for every key-set load;
  `jwks_keys` — keys currently loaded; `jwks_usable` — 1 while usable keys are loaded.
* `ratelimit_evictions_total` — live in-process budgets forgotten because the subject bound was
  reached; `ratelimit_redis_up` — 0 while Checks use the fallback instead of Redis (only when
  Redis is configured: without it there is nothing to be up or down).
* `build_info{version}`, the standard `process_*` metrics, and no `*_created` series
  (`runtime.metrics`).

With `--workers N` each worker writes to a shared directory (prometheus_client multiprocess mode)
and the parent serves the sum; gauges then report the minimum across workers.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from authz.jwks import RefreshOutcome
from runtime.metrics import describe_build

NAMESPACE = "orrery_authz"
# Checks take tens of microseconds to a few milliseconds; the last buckets catch JWKS waits.
LATENCY_BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    1.0,
    2.5,
)


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None, *, redis: bool = False) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        r = self.registry
        describe_build(NAMESPACE, r)
        self.decisions = Counter(
            "decisions",
            "Check decisions by outcome and reason code.",
            ["decision", "reason"],
            namespace=NAMESPACE,
            registry=r,
        )
        self.check_seconds = Histogram(
            "check_duration_seconds",
            "Time spent answering one Check.",
            buckets=LATENCY_BUCKETS,
            namespace=NAMESPACE,
            registry=r,
        )
        self.token_cache = Counter(
            "token_cache",
            "Verified-token cache lookups by result.",
            ["result"],
            namespace=NAMESPACE,
            registry=r,
        )
        self.token_refusals_remembered = Counter(
            "token_refusals_remembered",
            "Token refusals answered from memory instead of another signature check.",
            namespace=NAMESPACE,
            registry=r,
        )
        self.jwks_refresh = Counter(
            "jwks_refresh", "JWKS loads by outcome.", ["outcome"], namespace=NAMESPACE, registry=r
        )
        self.jwks_keys = Gauge(
            "jwks_keys",
            "Signing keys currently loaded.",
            multiprocess_mode="min",
            namespace=NAMESPACE,
            registry=r,
        )
        self.jwks_usable = Gauge(
            "jwks_usable",
            "1 while usable signing keys are loaded.",
            multiprocess_mode="min",
            namespace=NAMESPACE,
            registry=r,
        )
        self.ratelimit_evictions = Counter(
            "ratelimit_evictions",
            "Live in-process budgets evicted at the subject bound.",
            namespace=NAMESPACE,
            registry=r,
        )
        self.ratelimit_redis_up: Gauge | None = None
        if redis:
            self.ratelimit_redis_up = Gauge(
                "ratelimit_redis_up",
                "0 while Checks use the fallback limit instead of Redis.",
                multiprocess_mode="min",
                namespace=NAMESPACE,
                registry=r,
            )
            self.ratelimit_redis_up.set(1)
        self._hit = self.token_cache.labels("hit")
        self._miss = self.token_cache.labels("miss")
        self._decision_children: dict[tuple[str, str], Counter] = {}

    def decision(self, decision: str, reason: str, seconds: float) -> None:
        """Count one Check and its latency (label children are resolved once per reason)."""
        child = self._decision_children.get((decision, reason))
        if child is None:
            child = self._decision_children[decision, reason] = self.decisions.labels(
                decision, reason
            )
        child.inc()
        self.check_seconds.observe(seconds)

    def cache_lookup(self, hit: bool) -> None:
        (self._hit if hit else self._miss).inc()

    def jwks_loaded(self, outcome: RefreshOutcome, keys: int) -> None:
        self.jwks_refresh.labels(outcome).inc()
        self.jwks_keys.set(keys)

    def redis_state(self, up: bool) -> None:
        if self.ratelimit_redis_up is not None:
            self.ratelimit_redis_up.set(1 if up else 0)
