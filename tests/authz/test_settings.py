"""authz configuration: defaults, validation, and one error that names every bad variable."""

from __future__ import annotations

import pytest

from authz.settings import AuthzSettings, parse_algorithms
from contract.assertion import new_keys_spec
from contract.identity import parse_role_autonomy
from runtime.env import parse_rate
from runtime.errors import ConfigError


def minimal_env(**overrides: str) -> dict[str, str]:
    env = {
        "ORRERY_A2A_JWT_ISSUER": "https://issuer.test",
        "ORRERY_A2A_JWT_AUDIENCE": "orrery-a2a",
        "ORRERY_CONSOLE_JWT_AUDIENCE": "orrery-console",
        "ORRERY_CONSOLE_CLIENTS": "console",
        "ORRERY_A2A_JWKS_URL": "https://issuer.test/jwks.json",
        "ORRERY_A2A_ASSERTION_KEYS": new_keys_spec("k1"),
    }
    env.update(overrides)
    return {name: value for name, value in env.items() if value != "<unset>"}


def problems(env: dict[str, str]) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        AuthzSettings.from_env(env)
    return [problem.split(":")[0] for problem in caught.value.problems]


def test_defaults_match_the_design() -> None:
    """With only the required variables, every default is docs/contract.md#authz-variables's."""
    settings = AuthzSettings.from_env(minimal_env())
    assert settings.addr == ("127.0.0.1", 9191)
    assert settings.diag_addr == ("127.0.0.1", 9192)
    assert settings.tokens.algorithms == {"RS256", "PS256", "ES256", "EdDSA"}
    assert settings.tokens.max_lifetime == 24 * 3600
    assert settings.tokens.leeway == 60
    assert settings.jwks.cooldown == 30
    assert settings.jwks.refresh == 300
    assert settings.roles.claim == "roles"
    assert settings.roles.autonomy == (("viewer", "L1"), ("operator", "L2"), ("admin", "L3"))
    assert settings.roles.scope_fallback is False
    assert (settings.limits.rate, settings.limits.period, settings.limits.burst) == (60, 60, 60)
    assert settings.limits.redis_url is None
    assert settings.limits.failure_mode == "local"
    assert settings.limits.redis_retry == 1.0


@pytest.mark.parametrize("value", ["<unset>", "", " , "])
def test_the_console_clients_are_required(value: str) -> None:
    """Without ORRERY_CONSOLE_CLIENTS no one could be a human: start-up refuses, naming it."""
    assert problems(minimal_env(ORRERY_CONSOLE_CLIENTS=value)) == ["ORRERY_CONSOLE_CLIENTS"]


def test_the_console_clients_are_a_list() -> None:
    """A comma-separated list of client ids, spaces around them ignored."""
    settings = AuthzSettings.from_env(minimal_env(ORRERY_CONSOLE_CLIENTS=" console , admin-ui "))
    assert settings.tokens.console_clients == {"console", "admin-ui"}


def test_every_bad_variable_is_named_at_once() -> None:
    """Several mistakes produce one error listing each variable."""
    env = minimal_env(
        ORRERY_A2A_JWT_ISSUER="<unset>",
        ORRERY_A2A_JWT_ALGORITHMS="HS256,ES256",
        ORRERY_A2A_RATE_LIMIT="lots",
        ORRERY_A2A_ASSERTION_KEYS="k1=short",
        ORRERY_A2A_AUTHZ_ADDR="nowhere",
        ORRERY_A2A_REDIS_FAILURE_MODE="open",
    )
    assert problems(env) == [
        "ORRERY_A2A_AUTHZ_ADDR",
        "ORRERY_A2A_JWT_ISSUER",
        "ORRERY_A2A_JWT_ALGORITHMS",
        "ORRERY_A2A_ASSERTION_KEYS",
        "ORRERY_A2A_RATE_LIMIT",
        "ORRERY_A2A_REDIS_FAILURE_MODE",
    ]


@pytest.mark.parametrize("alg", ["HS256", "HS384", "HS512", "none", "None", "es256"])
def test_symmetric_and_none_algorithms_are_refused_in_config(alg: str) -> None:
    """The allow-list can hold asymmetric algorithms only, spelled exactly."""
    with pytest.raises(ValueError, match="unsupported algorithm"):
        parse_algorithms(f"ES256,{alg}")


def test_jwks_source_must_be_exactly_one() -> None:
    """Neither or both JWKS sources is a configuration error."""
    assert problems(minimal_env(ORRERY_A2A_JWKS_URL="<unset>")) == ["ORRERY_A2A_JWKS_URL"]
    both = minimal_env(ORRERY_A2A_JWKS_FILE="/tmp/jwks.json")
    assert problems(both) == ["ORRERY_A2A_JWKS_URL"]


@pytest.mark.parametrize(
    "url",
    ["http://issuer.test/jwks.json", "ftp://issuer.test/jwks", "https://u:p@issuer.test/jwks"],
)
def test_jwks_url_must_be_https_outside_loopback(url: str) -> None:
    """Plain HTTP is for loopback only; credentials in the URL are refused."""
    assert problems(minimal_env(ORRERY_A2A_JWKS_URL=url)) == ["ORRERY_A2A_JWKS_URL"]


def test_loopback_http_jwks_is_allowed() -> None:
    """The dev issuer serves its JWKS over plain HTTP on loopback."""
    url = "http://127.0.0.1:8090/.well-known/jwks.json"
    assert AuthzSettings.from_env(minimal_env(ORRERY_A2A_JWKS_URL=url)).jwks.url == url


def test_console_audience_must_differ_from_a2a_audience() -> None:
    """One audience for both surfaces would let a machine token act as a human on approvals."""
    env = minimal_env(ORRERY_CONSOLE_JWT_AUDIENCE="orrery-a2a")
    assert problems(env) == ["ORRERY_CONSOLE_JWT_AUDIENCE"]


def test_missing_assertion_keys_are_named() -> None:
    """authz cannot sign without ORRERY_A2A_ASSERTION_KEYS."""
    assert problems(minimal_env(ORRERY_A2A_ASSERTION_KEYS="<unset>")) == [
        "ORRERY_A2A_ASSERTION_KEYS"
    ]


def test_config_error_never_echoes_a_secret() -> None:
    """A bad key spec or Redis URL is named without printing its value."""
    env = minimal_env(
        ORRERY_A2A_ASSERTION_KEYS="k1=c2VjcmV0c2VjcmV0",
        ORRERY_A2A_REDIS_URL="http://user:hunter2@redis.internal",
    )
    with pytest.raises(ConfigError) as caught:
        AuthzSettings.from_env(env)
    assert "c2VjcmV0c2VjcmV0" not in str(caught.value)
    assert "hunter2" not in str(caught.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("60/minute", (60, 60)), ("10/second", (10, 1)), ("1000 / hours", (1000, 3600))],
)
def test_rates_parse(text: str, expected: tuple[int, int]) -> None:
    """A rate is a count per second, minute, hour or day."""
    assert parse_rate(text) == expected


@pytest.mark.parametrize("text", ["", "60", "0/minute", "60/fortnight", "-1/second"])
def test_bad_rates_are_refused(text: str) -> None:
    """Anything else names the expected shape."""
    with pytest.raises(ValueError, match="60/minute"):
        parse_rate(text)


def test_burst_defaults_to_the_rate_and_can_be_set() -> None:
    """ORRERY_A2A_RATE_BURST overrides how many requests may come at once."""
    settings = AuthzSettings.from_env(minimal_env(ORRERY_A2A_RATE_LIMIT="10/second"))
    assert settings.limits.burst == 10
    burst = AuthzSettings.from_env(minimal_env(ORRERY_A2A_RATE_BURST="3"))
    assert burst.limits.burst == 3
    assert burst.limits.policy == '"subject";q=60;w=60'


@pytest.mark.parametrize("text", ["admin", "admin=L4", "admin=L3,admin=L1", "bad role=L1"])
def test_bad_role_autonomy_is_refused(text: str) -> None:
    """Role mapping entries must be role=L1|L2|L3, each role once."""
    with pytest.raises(ValueError):
        parse_role_autonomy(text)


def test_durations_are_configurable_for_jwks() -> None:
    """The JWKS refresh, cooldown, stale window and timeout come from the environment."""
    env = minimal_env(
        ORRERY_A2A_JWKS_REFRESH="250ms",
        ORRERY_A2A_JWKS_COOLDOWN="1s",
        ORRERY_A2A_JWKS_STALE="2s",
        ORRERY_A2A_JWKS_TIMEOUT="500ms",
    )
    jwks = AuthzSettings.from_env(env).jwks
    assert (jwks.refresh, jwks.cooldown, jwks.stale, jwks.timeout) == (0.25, 1.0, 2.0, 0.5)
    assert jwks.retry == 0.25


def test_jwks_cooldown_cannot_be_switched_off() -> None:
    """A cooldown under 1 s would turn a stream of unknown kids into a stream of fetches."""
    assert problems(minimal_env(ORRERY_A2A_JWKS_COOLDOWN="0s")) == ["ORRERY_A2A_JWKS_COOLDOWN"]


def test_file_source_is_polled_every_second_by_default() -> None:
    """A JWKS file is checked for changes every second unless told otherwise."""
    env = minimal_env(ORRERY_A2A_JWKS_URL="<unset>", ORRERY_A2A_JWKS_FILE="/etc/jwks.json")
    assert AuthzSettings.from_env(env).jwks.refresh == 1.0


def test_a_key_entry_without_kid_never_reaches_the_startup_error() -> None:
    """A secret pasted without `kid=` (and padded) is named by position in the error authz
    prints at start-up, never shown."""
    secret = new_keys_spec("k1").partition("=")[2] + "="
    with pytest.raises(ConfigError) as caught:
        AuthzSettings.from_env(minimal_env(ORRERY_A2A_ASSERTION_KEYS=secret))
    assert secret.rstrip("=") not in str(caught.value)
    assert "ORRERY_A2A_ASSERTION_KEYS: entry 1: secret is not base64url" in str(caught.value)
