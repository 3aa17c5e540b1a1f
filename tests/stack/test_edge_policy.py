"""The deployment's edge policy: read from the environment (or flags), rendered into envoy.yaml."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from runtime.errors import ConfigError
from stack import cli, envoy_config
from stack.edge_policy import EdgePolicy
from stack.settings import StackSettings
from tests.e2e.conftest import envoy_validate

SOURCE = envoy_config.repo_config_path()


def _manager(config: envoy_config.Config) -> dict[str, Any]:
    return envoy_config.public_manager(config)


def _routes(config: envoy_config.Config) -> dict[str, dict[str, Any]]:
    routes = _manager(config)["route_config"]["virtual_hosts"][0]["routes"]
    return {route["name"]: route for route in routes}


def _client_limit(config: envoy_config.Config) -> dict[str, Any]:
    (limit,) = [
        f["typed_config"]
        for f in _manager(config)["http_filters"]
        if f["name"] == envoy_config.LOCAL_RATE_LIMIT
    ]
    return dict(limit)


def _heap(config: envoy_config.Config) -> int:
    (monitor,) = [
        m
        for m in config["overload_manager"]["resource_monitors"]
        if m["name"] == envoy_config.FIXED_HEAP
    ]
    return int(monitor["typed_config"]["max_heap_size_bytes"])


def test_an_empty_environment_keeps_the_files_values() -> None:
    """No variable set: the rendered file equals the source (no origins, 100/s, 200, 1 GiB)."""
    policy = EdgePolicy.from_env({})
    assert policy == EdgePolicy()
    source = envoy_config.load(SOURCE)
    assert envoy_config.render(source, policy=policy) == source
    bucket = _client_limit(source)["descriptors"][0]["token_bucket"]
    assert bucket == {"max_tokens": 200, "tokens_per_fill": 5, "fill_interval": "0.05s"}
    assert _heap(source) == 1024**3


def test_the_file_allows_no_browser_origin() -> None:
    """CORS is opt-in: the file's routes carry no CORS policy."""
    for name, route in _routes(envoy_config.load(SOURCE)).items():
        assert envoy_config.CORS not in route.get("typed_per_filter_config", {}), name


@pytest.mark.parametrize(
    ("rate", "tokens", "interval"),
    [
        ("100/second", 5, "0.050s"),
        ("5/second", 1, "0.200s"),
        ("60/minute", 1, "1.000s"),
        ("7/second", 7, "1.000s"),
        ("1000/second", 50, "0.050s"),
    ],
)
def test_a_client_rate_becomes_the_per_address_bucket(
    rate: str, tokens: int, interval: str
) -> None:
    """N/period refills at least every 50 ms (Envoy's floor) in whole milliseconds; the burst
    defaults to the rate's count."""
    policy = EdgePolicy.from_env({"ORRERY_A2A_CLIENT_RATE_LIMIT": rate})
    rendered = envoy_config.render(envoy_config.load(SOURCE), policy=policy)
    bucket = _client_limit(rendered)["descriptors"][0]["token_bucket"]
    count = int(rate.partition("/")[0])
    assert bucket == {"max_tokens": count, "tokens_per_fill": tokens, "fill_interval": interval}


def test_a_burst_alone_keeps_the_files_rate() -> None:
    policy = EdgePolicy.from_env({"ORRERY_A2A_CLIENT_RATE_BURST": "1000"})
    bucket = _client_limit(envoy_config.render(envoy_config.load(SOURCE), policy=policy))
    assert bucket["descriptors"][0]["token_bucket"] == {
        "max_tokens": 1000,
        "tokens_per_fill": 5,
        "fill_interval": "0.05s",
    }


@pytest.mark.parametrize(("text", "size"), [("512MiB", 512 * 1024**2), ("2GiB", 2 * 1024**3)])
def test_the_heap_budget_is_rendered_into_the_overload_manager(text: str, size: int) -> None:
    policy = EdgePolicy.from_env({"ORRERY_A2A_ENVOY_MAX_HEAP": text})
    assert _heap(envoy_config.render(envoy_config.load(SOURCE), policy=policy)) == size


def test_origins_put_a_cors_policy_on_the_browser_routes_only() -> None:
    """The card, /a2a and /approvals/ get a policy naming the origins, their methods and the
    headers a client needs; no credentials; Vary: Origin on their answers; a preflight from
    another origin is answered, never forwarded. The 404 route gets nothing."""
    policy = EdgePolicy.from_env(
        {"ORRERY_A2A_CORS_ORIGINS": " https://Console.Example , http://127.0.0.1:5173,"}
    )
    assert policy.cors_origins == ("https://console.example", "http://127.0.0.1:5173")
    routes = _routes(envoy_config.render(envoy_config.load(SOURCE), policy=policy))
    with_cors = {
        name
        for name, route in routes.items()
        if envoy_config.CORS in route.get("typed_per_filter_config", {})
    }
    assert with_cors == {*envoy_config.CORS_ROUTES, *envoy_config.PREFLIGHT_ROUTES}
    for name, methods in envoy_config.CORS_ROUTES.items():
        cors = routes[name]["typed_per_filter_config"][envoy_config.CORS]
        assert cors["forward_not_matching_preflights"] is False
        assert cors["allow_origin_string_match"] == [
            {"exact": "https://console.example", "ignore_case": True},
            {"exact": "http://127.0.0.1:5173", "ignore_case": True},
        ]
        assert cors["allow_methods"] == methods
        assert cors["allow_credentials"] is False
        assert "authorization" in cors["allow_headers"]
        assert "x-request-id" in cors["expose_headers"]
        assert envoy_config.VARY in routes[name]["response_headers_to_add"]
    assert routes["a2a"]["typed_per_filter_config"]["envoy.filters.http.ext_authz"]  # authz kept
    assert envoy_config.CORS not in routes["not_found"].get("typed_per_filter_config", {})


def test_preflight_routes_take_only_preflights_before_the_405s_and_fail_closed() -> None:
    """A direct-response route gets no CORS answer from Envoy, so each path whose other methods
    are a direct 405 gets a preflight route just before it: OPTIONS with Origin and
    Access-Control-Request-Method only, its path's CORS policy, and ext_authz on (were a preflight
    ever forwarded, it carries no token)."""
    policy = EdgePolicy(cors_origins=("https://console.example",))
    rendered = envoy_config.render(envoy_config.load(SOURCE), policy=policy)
    routes = _routes(rendered)
    names = list(routes)
    for name, (before, like) in envoy_config.PREFLIGHT_ROUTES.items():
        route = routes[name]
        assert names.index(name) == names.index(before) - 1
        assert {k: v for k, v in route["match"].items() if k != "headers"} == {
            k: v for k, v in routes[before]["match"].items() if k != "headers"
        }
        assert route["match"]["headers"] == envoy_config.PREFLIGHT_HEADERS
        per_filter = route["typed_per_filter_config"]
        assert (
            per_filter[envoy_config.CORS]
            == routes[like]["typed_per_filter_config"][envoy_config.CORS]
        )
        ext_authz = per_filter["envoy.filters.http.ext_authz"]
        assert not ext_authz.get("disabled")
        surface = "approvals" if like == "approvals" else "a2a"  # the public card's: a2a
        assert ext_authz["check_settings"]["context_extensions"]["surface"] == surface


def test_any_origin_never_allows_credentials() -> None:
    """`*` matches every origin, and credentials stay off (the edge takes bearer tokens)."""
    policy = EdgePolicy.from_env({"ORRERY_A2A_CORS_ORIGINS": "*"})
    cors = _routes(envoy_config.render(envoy_config.load(SOURCE), policy=policy))["a2a"][
        "typed_per_filter_config"
    ][envoy_config.CORS]
    assert cors["allow_origin_string_match"] == [{"exact": "*"}]
    assert cors["allow_credentials"] is False


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("ORRERY_A2A_CORS_ORIGINS", "https://a.example/path", "expected origins"),
        ("ORRERY_A2A_CORS_ORIGINS", "https://a.example?x=1", "expected origins"),
        ("ORRERY_A2A_CORS_ORIGINS", "ftp://a.example", "expected origins"),
        ("ORRERY_A2A_CORS_ORIGINS", "null", "expected origins"),
        ("ORRERY_A2A_CORS_ORIGINS", "https://user@a.example", "expected origins"),
        ("ORRERY_A2A_CORS_ORIGINS", "https://a.example:99999", "expected origins"),
        ("ORRERY_A2A_CORS_ORIGINS", "*, https://a.example", "give `*` alone"),
        ("ORRERY_A2A_CLIENT_RATE_LIMIT", "fast", "expected a rate"),
        ("ORRERY_A2A_CLIENT_RATE_BURST", "0", "at least 1"),
        ("ORRERY_A2A_ENVOY_MAX_HEAP", "1MiB", "at least 64MiB"),
        ("ORRERY_A2A_ENVOY_MAX_HEAP", "lots", "expected a size"),
        ("ORRERY_A2A_XFF_TRUSTED_HOPS", "11", "at most 10"),
        ("ORRERY_A2A_XFF_TRUSTED_HOPS", "one", "expected an integer"),
        ("ORRERY_A2A_PROXY_PROTOCOL", "maybe", "expected true or false"),
    ],
)
def test_a_bad_value_is_one_problem_naming_the_variable(
    variable: str, value: str, message: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        EdgePolicy.from_env({variable: value})
    (problem,) = raised.value.problems
    assert problem.startswith(f"{variable}: ") and message in problem


def test_up_reads_the_policy_with_its_other_settings() -> None:
    """StackSettings carries the policy, and reports its problems with the others."""
    settings = StackSettings.from_env({"ORRERY_A2A_CORS_ORIGINS": "https://a.example"})
    assert settings.edge.cors_origins == ("https://a.example",)
    with pytest.raises(ConfigError) as raised:
        StackSettings.from_env({"ORRERY_A2A_ENVOY_MAX_HEAP": "1", "ORRERY_A2A_REPLICAS": "99"})
    assert len(raised.value.problems) == 2


@pytest.mark.envoy
def test_envoy_config_renders_the_policy_from_flags_into_a_file_envoy_accepts(
    tmp_path: Path,
) -> None:
    """`envoy-config --cors-origins … --client-rate-limit … --max-heap …` (flags win over the
    environment): Envoy validates the result."""
    out = tmp_path / "envoy.yaml"
    argv = [
        "envoy-config",
        "--cors-origins",
        "https://console.example",
        "--client-rate-limit",
        "50/second",
        "--max-heap",
        "256MiB",
        "--out",
        str(out),
    ]
    assert cli.main(argv, env={"ORRERY_A2A_CORS_ORIGINS": "https://other.example"}) == 0
    rendered = yaml.safe_load(out.read_text())
    cors = _routes(rendered)["a2a"]["typed_per_filter_config"][envoy_config.CORS]
    assert cors["allow_origin_string_match"] == [
        {"exact": "https://console.example", "ignore_case": True}
    ]
    assert _client_limit(rendered)["descriptors"][0]["token_bucket"]["max_tokens"] == 50
    assert _heap(rendered) == 256 * 1024**2
    result = envoy_validate(out)
    assert result.returncode == 0, result.stdout + result.stderr


def test_envoy_config_refuses_a_bad_policy(capsys: pytest.CaptureFixture[str]) -> None:
    """A bad value is exit 2 and the variable's name."""
    assert cli.main(["envoy-config", "--max-heap", "tiny"], env={}) == 2
    assert "ORRERY_A2A_ENVOY_MAX_HEAP" in capsys.readouterr().err


def test_trusted_hops_count_the_forwarded_address_and_keep_the_header() -> None:
    """N trusted hops: Envoy takes the client N from the right of X-Forwarded-For, so the early
    mutation that drops a client's copy goes; the other early mutations, if any, stay."""
    source = envoy_config.load(SOURCE)
    assert "x-forwarded-for" in str(_manager(source)["early_header_mutation_extensions"])
    rendered = envoy_config.render(
        source, policy=EdgePolicy.from_env({"ORRERY_A2A_XFF_TRUSTED_HOPS": "2"})
    )
    manager = _manager(rendered)
    assert manager["xff_num_trusted_hops"] == 2
    assert manager["use_remote_address"] is True
    assert "x-forwarded-for" not in str(manager.get("early_header_mutation_extensions"))
    unset = envoy_config.render(source, policy=EdgePolicy.from_env({}))
    assert _manager(unset)["xff_num_trusted_hops"] == 0
    assert "x-forwarded-for" in str(_manager(unset)["early_header_mutation_extensions"])


def test_proxy_protocol_reads_the_client_from_the_public_listener_only() -> None:
    """The PROXY protocol listener filter goes on the public listener, first; the diagnostics
    listener (scraped directly) never expects it."""
    rendered = envoy_config.render(
        envoy_config.load(SOURCE), policy=EdgePolicy.from_env({"ORRERY_A2A_PROXY_PROTOCOL": "true"})
    )
    (first, *_) = envoy_config.listener(rendered)["listener_filters"]
    assert first["name"] == envoy_config.PROXY_PROTOCOL
    diag = envoy_config.listener(rendered, envoy_config.DIAG_LISTENER)
    assert envoy_config.PROXY_PROTOCOL not in str(diag.get("listener_filters"))


def test_hops_and_proxy_protocol_together_are_refused() -> None:
    """A hop count means nothing when the peer comes from the PROXY header: one or the other."""
    with pytest.raises(ConfigError) as raised:
        EdgePolicy.from_env(
            {"ORRERY_A2A_XFF_TRUSTED_HOPS": "1", "ORRERY_A2A_PROXY_PROTOCOL": "true"}
        )
    (problem,) = raised.value.problems
    assert "not both" in problem
