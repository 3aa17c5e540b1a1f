"""envoy/envoy.yaml: every security-relevant setting, then the real Envoy's behaviour.

The first half loads the file into envoy-data-plane's typed `Bootstrap` and asserts each setting by
name, so an edit that weakens one fails the test named for it. The second half runs the real Envoy
binary on ephemeral ports against a recording upstream and a fake authz, and checks what the
settings promise: refusals happen in Envoy, and the upstream sees only what it should.
"""

from __future__ import annotations

import asyncio
import datetime
import importlib
import json
import re
import socket
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from adapter.messages import MAX_BODY_BYTES
from contract.http_checks import CARRIERS
from stack import envoy_config
from stack.edge_policy import EdgePolicy
from tests.e2e.conftest import (
    ENVOY_YAML,
    FakeAuthz,
    Recorder,
    RunningEnvoy,
    bound_socket,
    envoy_for,
    envoy_validate,
    listener_port,
    raw_request,
)


def _quiet() -> None:
    """envoy-data-plane's generated models trip a pydantic deprecation on import; not ours to
    fix, and pytest turns warnings into errors."""
    warnings.filterwarnings("ignore", "Using `@model_validator`", DeprecationWarning)


with warnings.catch_warnings():
    _quiet()
    from envoy_data_plane.envoy.config.bootstrap.v3 import Bootstrap
    from envoy_data_plane.envoy.config.core.v3 import (
        ApiVersion,
        HeaderValueOptionHeaderAppendAction,
        HttpProtocolOptionsHeadersWithUnderscoresAction,
    )
    from envoy_data_plane.envoy.config.route.v3 import Route
    from envoy_data_plane.envoy.extensions.filters.http.ext_authz.v3 import ExtAuthz
    from envoy_data_plane.envoy.extensions.filters.network.http_connection_manager.v3 import (
        HttpConnectionManager,
        HttpConnectionManagerPathWithEscapedSlashesAction,
    )
    from envoy_data_plane.envoy.type.v3 import StatusCode

ANY_ADDRESS = "0.0.0.0"
SOURCE = "127.0.0.2"  # a client address of its own (Envoy's per-address budget)
EXT_AUTHZ = "envoy.filters.http.ext_authz"
HEADER_MUTATION = "envoy.filters.http.header_mutation"
LUA = "envoy.filters.http.lua"
CORS = "envoy.filters.http.cors"
LOCAL_RATE_LIMIT = "envoy.filters.http.local_ratelimit"
BUFFER = "envoy.filters.http.buffer"
FIXED_HEAP = "envoy.resource_monitors.fixed_heap"
CONTRACT_HEADERS = {
    "authorization",
    "x-request-id",
    "traceparent",
    "tracestate",
    "x-envoy-external-address",
}
MUTABLE_HEADERS = {
    "x-orrery-principal",
    "x-orrery-trace-link",
    "authorization",
    "traceparent",
    "tracestate",
}


def _import_types(node: Any) -> None:
    """Import the envoy-data-plane module of every `@type`, so `Any` fields can be unpacked."""
    if isinstance(node, dict):
        type_url = node.get("@type")
        if isinstance(type_url, str):
            package = type_url.rsplit("/", 1)[-1].rsplit(".", 1)[0]
            with warnings.catch_warnings():
                _quiet()
                importlib.import_module(f"envoy_data_plane.{package}")
        for value in node.values():
            _import_types(value)
    elif isinstance(node, list):
        for value in node:
            _import_types(value)


# envoy-data-plane cannot read these two OutlierDetection fields by any spelling (its name
# conversion turns `5xx` into `5_xx`); the typed model goes without them, and
# `test_outlier_detection_ejects_on_failures_envoy_saw_itself_only` reads them from the YAML.
_UNREADABLE_OUTLIER_FIELDS = ("consecutive_5xx", "enforcing_consecutive_5xx")


@pytest.fixture(scope="module")
def bootstrap() -> Bootstrap:
    data = yaml.safe_load(ENVOY_YAML.read_text())
    _import_types(data)
    for cluster in data["static_resources"]["clusters"]:
        for name in _UNREADABLE_OUTLIER_FIELDS:
            cluster.get("outlier_detection", {}).pop(name, None)
    return Bootstrap.from_dict(data)


def _listener(bootstrap: Bootstrap, name: str) -> Any:
    (found,) = [item for item in bootstrap.static_resources.listeners if item.name == name]
    return found


@pytest.fixture(scope="module")
def hcm(bootstrap: Bootstrap) -> HttpConnectionManager:
    listener = _listener(bootstrap, envoy_config.LISTENER)
    (chain,) = listener.filter_chains
    (network_filter,) = chain.filters
    manager = network_filter.typed_config.unpack()
    assert isinstance(manager, HttpConnectionManager)
    return manager


@pytest.fixture(scope="module")
def http_filters(hcm: HttpConnectionManager) -> dict[str, Any]:
    return {f.name: f.typed_config.unpack() for f in hcm.http_filters}


@pytest.fixture(scope="module")
def ext_authz(http_filters: dict[str, Any]) -> ExtAuthz:
    config = http_filters[EXT_AUTHZ]
    assert isinstance(config, ExtAuthz)
    return config


@pytest.fixture(scope="module")
def routes(hcm: HttpConnectionManager) -> dict[str, Route]:
    assert hcm.route_config is not None
    (virtual_host,) = hcm.route_config.virtual_hosts
    assert virtual_host.domains == ["*"]
    return {route.name: route for route in virtual_host.routes}


def _per_route(route: Route, name: str) -> Any:
    config = route.typed_per_filter_config.get(name)
    return None if config is None else config.unpack()


def _socket(address: Any) -> tuple[str, int]:
    return address.socket_address.address, address.socket_address.port_value


def _method(route: Route) -> str | None:
    for matcher in route.match.headers:
        if matcher.name == ":method":
            exact = matcher.string_match.exact
            return str(exact if exact is not None else matcher.string_match.safe_regex.regex)
    return None


# ---------------------------------------------------------------------------------------------
# The file, setting by setting


def test_envoy_validates_the_file() -> None:
    """`envoy --mode validate` accepts envoy/envoy.yaml as it is."""
    result = envoy_validate(ENVOY_YAML)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "OK" in result.stdout + result.stderr


def test_admin_listens_on_loopback_only(bootstrap: Bootstrap) -> None:
    """The admin API (drain, log levels, config dump) is reachable from loopback only."""
    assert bootstrap.admin is not None
    host, _ = _socket(bootstrap.admin.address)
    assert host == "127.0.0.1"


def test_public_listener_defaults_to_loopback(bootstrap: Bootstrap) -> None:
    """The file's listener is the dev default 127.0.0.1:8080; compose renders 0.0.0.0."""
    listener = _listener(bootstrap, envoy_config.LISTENER)
    assert _socket(listener.address) == ("127.0.0.1", 8080)
    assert listener.per_connection_buffer_limit_bytes is not None


def test_clusters_are_loopback_sidecars(bootstrap: Bootstrap) -> None:
    """authz (9191, HTTP/2 for gRPC), the adapter (8081) and the admin API (9901, for the diag
    listener) are on loopback, nothing else."""
    clusters = {cluster.name: cluster for cluster in bootstrap.static_resources.clusters}
    assert set(clusters) == {"authz", "adapter", envoy_config.ADMIN_CLUSTER}
    expected = {
        "authz": ("127.0.0.1", 9191),
        "adapter": ("127.0.0.1", 8081),
        envoy_config.ADMIN_CLUSTER: ("127.0.0.1", 9901),
    }
    for name, cluster in clusters.items():
        endpoints = [
            lb.endpoint.address
            for group in cluster.load_assignment.endpoints
            for lb in group.lb_endpoints
        ]
        assert [_socket(address) for address in endpoints] == [expected[name]]
    options = (
        clusters["authz"]
        .typed_extension_protocol_options["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
        .unpack()
    )
    assert options.explicit_http_config.http2_protocol_options is not None


@pytest.fixture(scope="module")
def clusters() -> dict[str, dict[str, Any]]:
    """The file's clusters as plain YAML (the health, outlier and retry settings by name)."""
    config = envoy_config.load(ENVOY_YAML)
    return {cluster["name"]: cluster for cluster in config["static_resources"]["clusters"]}


SAFE_RETRIES = {"connect-failure", "refused-stream", "reset-before-request"}
PREVIOUS_HOSTS = "envoy.retry_host_predicates.previous_hosts"


def test_authz_replicas_are_health_checked_over_grpc_health(
    clusters: dict[str, dict[str, Any]],
) -> None:
    """authz's `grpc.health.v1` (NOT_SERVING once it stops) every second, 0.5 s to answer: a
    frozen or stopped replica is out of the rotation within about two seconds."""
    (check,) = clusters["authz"]["health_checks"]
    assert check["grpc_health_check"] == {}
    assert (check["interval"], check["timeout"], check["unhealthy_threshold"]) == ("1s", "0.5s", 2)
    assert check["healthy_threshold"] == 1
    assert check["no_traffic_interval"] == "5s"  # Envoy's default, 60 s, before any traffic


def test_adapter_replicas_are_health_checked_on_readyz(
    clusters: dict[str, dict[str, Any]],
) -> None:
    """The adapter's /readyz every second: its 503 (a stop has begun, its stores are down)
    takes it out at the next check; it is back after one good answer."""
    (check,) = clusters["adapter"]["health_checks"]
    assert check["http_health_check"] == {"path": "/readyz"}
    assert (check["interval"], check["healthy_threshold"]) == ("1s", 1)
    assert check["no_traffic_interval"] == "5s"


@pytest.mark.parametrize("cluster", ["authz", "adapter"])
def test_outlier_detection_ejects_on_failures_envoy_saw_itself_only(
    clusters: dict[str, dict[str, Any]], cluster: str
) -> None:
    """Two consecutive connection failures, resets or timeouts eject a replica (for 5 s and
    more when it repeats), at most half of them; an upstream's own 5xx answers eject nothing
    (they are the same on every replica, e.g. a storage outage)."""
    outliers = clusters[cluster]["outlier_detection"]
    assert outliers["split_external_local_origin_errors"] is True
    assert outliers["consecutive_local_origin_failure"] == 2
    assert outliers["enforcing_consecutive_local_origin_failure"] == 100
    for enforcing in (
        "enforcing_consecutive_5xx",
        "enforcing_consecutive_gateway_failure",
        "enforcing_success_rate",
        "enforcing_local_origin_success_rate",
    ):
        assert outliers[enforcing] == 0, enforcing
    assert outliers["base_ejection_time"] == "5s"
    assert outliers["max_ejection_percent"] == 50


@pytest.mark.parametrize("cluster", ["authz", "adapter"])
def test_a_dying_replica_may_have_all_its_requests_retried_at_once(
    clusters: dict[str, dict[str, Any]], cluster: str
) -> None:
    """Room for 64 concurrent retries (Envoy's default is 3): when a replica dies under load,
    each request it held or was about to get may need its one harmless retry."""
    (thresholds,) = clusters[cluster]["circuit_breakers"]["thresholds"]
    assert thresholds == {"max_retries": 64}


def test_the_adapter_is_retried_only_where_it_cannot_have_seen_the_request(
    routes: dict[str, Route], hcm: HttpConnectionManager
) -> None:
    """A request is sent again, to another replica, only when its connection failed or was
    refused, or was reset before the request went out: never on a 5xx, a timeout or a reset after
    sending, so a SendMessage the adapter may have started never runs twice. No route overrides
    this."""
    assert hcm.route_config is not None
    (virtual_host,) = hcm.route_config.virtual_hosts
    policy = virtual_host.retry_policy
    assert policy is not None
    assert set(policy.retry_on.split(",")) == SAFE_RETRIES
    assert [predicate.name for predicate in policy.retry_host_predicate] == [PREVIOUS_HOSTS]
    assert all(route.route is None or route.route.retry_policy is None for route in routes.values())


def test_a_check_is_asked_again_of_another_authz_when_one_fails_under_it(
    ext_authz: ExtAuthz,
) -> None:
    """A Check that failed at the connection (or was reset: a killed replica) goes to another
    authz; a Check has no effect to repeat (docs/operations.md#replicas-and-draining)."""
    assert ext_authz.grpc_service is not None
    policy = ext_authz.grpc_service.retry_policy
    assert policy is not None
    assert set(policy.retry_on.split(",")) == SAFE_RETRIES | {"reset"}
    assert [predicate.name for predicate in policy.retry_host_predicate] == [PREVIOUS_HOSTS]


def test_ext_authz_fails_closed_with_503(ext_authz: ExtAuthz) -> None:
    """authz unreachable, slow or erroring means 503, never a pass: no fail-open, no shadow."""
    assert ext_authz.failure_mode_allow is False
    assert ext_authz.failure_mode_allow_header_add is False
    assert ext_authz.status_on_error is not None
    assert ext_authz.status_on_error.code == StatusCode.ServiceUnavailable
    assert ext_authz.shadow_mode is False
    assert ext_authz.filter_enabled is None  # enabled for 100 % of requests
    assert ext_authz.filter_enabled_metadata is None


def test_ext_authz_calls_authz_over_grpc_v3_with_a_short_timeout(ext_authz: ExtAuthz) -> None:
    """Check goes to the `authz` cluster (v3 API) and gives up quickly (then 503)."""
    assert ext_authz.transport_api_version == ApiVersion.V3
    assert ext_authz.grpc_service is not None
    assert ext_authz.grpc_service.envoy_grpc.cluster_name == "authz"
    timeout = ext_authz.grpc_service.timeout
    assert timeout is not None
    assert datetime.timedelta(0) < timeout <= datetime.timedelta(seconds=2)


def test_ext_authz_sends_only_the_headers_authz_needs(ext_authz: ExtAuthz) -> None:
    """allowed_headers is the contract's list plus the x-orrery- prefix; no body, no peer cert."""
    assert ext_authz.allowed_headers is not None
    exact = {p.exact for p in ext_authz.allowed_headers.patterns if p.exact is not None}
    prefixes = {p.prefix for p in ext_authz.allowed_headers.patterns if p.prefix is not None}
    assert exact == CONTRACT_HEADERS
    assert prefixes == {"x-orrery-"}
    assert len(ext_authz.allowed_headers.patterns) == len(exact) + len(prefixes)
    assert ext_authz.with_request_body is None
    assert ext_authz.include_peer_certificate is False


def test_ext_authz_may_only_touch_the_contract_headers(ext_authz: ExtAuthz) -> None:
    """An OK from authz may set/remove only the contract's headers; anything else is a 500."""
    rules = ext_authz.decoder_header_mutation_rules
    assert ext_authz.validate_mutations is True
    assert rules is not None
    assert rules.disallow_all is True
    assert rules.disallow_is_error is True
    assert rules.allow_envoy is not True
    assert rules.allow_all_routing is not True
    assert rules.allow_expression is not None
    pattern = rules.allow_expression.regex
    assert pattern.startswith("^") and pattern.endswith("$")
    assert set(pattern[2:-2].split("|")) == MUTABLE_HEADERS
    assert ext_authz.clear_route_cache is False


def test_filter_order_puts_ext_authz_before_the_router(hcm: HttpConnectionManager) -> None:
    """CORS preflights first, request hygiene, the per-address budget, then header hygiene and
    the body cap before ext_authz; the router is last."""
    names = [f.name for f in hcm.http_filters]
    assert names == [
        CORS,
        LUA,
        LOCAL_RATE_LIMIT,
        HEADER_MUTATION,
        BUFFER,
        EXT_AUTHZ,
        "envoy.filters.http.router",
    ]


PUBLIC_ROUTES = {
    "agent_card": "/.well-known/agent-card.json",
    "card_keys": "/.well-known/jwks.json",
}


def test_only_the_public_card_and_its_keys_are_forwarded_without_authz(
    routes: dict[str, Route],
) -> None:
    """Every route that reaches an upstream runs ext_authz, except the public agent card and the
    key set that verifies its signature."""
    for name, route in routes.items():
        per_route = _per_route(route, EXT_AUTHZ)
        forwards = route.route is not None
        disabled = per_route is not None and per_route.disabled is True
        if name in PUBLIC_ROUTES:
            assert forwards and disabled
        elif forwards:
            assert not disabled, name
            assert per_route is not None and per_route.check_settings is not None, name
        else:
            assert route.direct_response is not None, name


REST_ID = "[A-Za-z0-9_-]+"  # an id segment (authz bounds its length: authz/surfaces.py)
# The HTTP+JSON binding's routes: (path regex, methods, the 405 route after it, its Allow).
REST_ROUTES = {
    "a2a_rest_post": (
        f"/a2a/(message:(send|stream)|tasks/{REST_ID}:(cancel|subscribe))",
        "POST",
        "a2a_rest_post_methods",
        "POST",
    ),
    "a2a_rest_get": (
        f"/a2a/(tasks|tasks/{REST_ID}|extendedAgentCard)",
        "GET",
        "a2a_rest_get_methods",
        "GET",
    ),
    "a2a_rest_push": (
        f"/a2a/tasks/{REST_ID}/pushNotificationConfigs(/{REST_ID})?",
        "GET|POST|DELETE",
        "a2a_rest_push_methods",
        "GET, POST, DELETE",
    ),
}


def test_each_authz_route_names_its_surface(routes: dict[str, Route]) -> None:
    """POST /a2a and /a2a/ and the HTTP+JSON routes are surface a2a; GET and POST /approvals/
    are surface approvals."""
    expected = {
        "a2a": ("/a2a", None, "POST", "a2a"),
        "a2a_slash": ("/a2a/", None, "POST", "a2a"),
        "approvals": (None, "/approvals/", "GET|POST", "approvals"),
    }
    forwarding = {name for name, route in routes.items() if route.route is not None}
    assert forwarding == {*expected, *REST_ROUTES, *PUBLIC_ROUTES}
    for name, (regex, methods, _, _) in REST_ROUTES.items():
        route = routes[name]
        assert route.match.safe_regex.regex == regex, name
        (method,) = route.match.headers
        matcher = method.string_match
        assert methods == (matcher.safe_regex.regex if matcher.safe_regex else matcher.exact)
        assert route.route is not None and route.route.cluster == "adapter"
        per_route = _per_route(route, EXT_AUTHZ)
        assert dict(per_route.check_settings.context_extensions) == {"surface": "a2a"}
    for name, (path, prefix, method, surface) in expected.items():
        route = routes[name]
        assert (route.match.path, route.match.prefix, _method(route)) == (path, prefix, method)
        assert route.route is not None and route.route.cluster == "adapter"
        per_route = _per_route(route, EXT_AUTHZ)
        assert dict(per_route.check_settings.context_extensions) == {"surface": surface}


@pytest.mark.parametrize("name", sorted(PUBLIC_ROUTES))
def test_public_routes_are_get_only_and_drop_reserved_and_credential_headers(
    routes: dict[str, Route], name: str
) -> None:
    """The card and card-key routes strip x-orrery-*, authorization and cookies (nothing
    consumes them there), take GET only, and have a short deadline."""
    card = routes[name]
    assert card.match.path == PUBLIC_ROUTES[name]
    assert _method(card) == "GET"
    assert card.route is not None and card.route.cluster == "adapter"
    assert card.route.timeout is not None
    assert datetime.timedelta(0) < card.route.timeout <= datetime.timedelta(seconds=60)
    mutations = _per_route(card, HEADER_MUTATION).mutations.request_mutations
    removed = {m.remove for m in mutations if m.remove is not None}
    prefixes = {m.remove_on_match.key_matcher.prefix for m in mutations if m.remove_on_match}
    assert removed == {"authorization", "proxy-authorization", "cookie"}
    assert prefixes == {"x-orrery-"}


def test_everything_else_is_a_404_from_envoy(routes: dict[str, Route]) -> None:
    """The last route catches every other path with a direct 404 (and skips authz)."""
    last = list(routes.values())[-1]
    assert last.name == "not_found"
    assert last.match.prefix == "/"
    assert last.direct_response is not None
    assert last.direct_response.status == 404
    assert _per_route(last, EXT_AUTHZ).disabled is True


def test_connection_manager_treats_every_client_as_external(hcm: HttpConnectionManager) -> None:
    """use_remote_address, no trusted hops, no internal peers: x-request-id and x-envoy-* are
    Envoy's own, never a client's."""
    assert hcm.use_remote_address is True
    assert hcm.xff_num_trusted_hops == 0
    assert hcm.skip_xff_append is False
    internal = hcm.internal_address_config
    assert internal is not None and internal.unix_sockets is False
    assert {(c.address_prefix, c.prefix_len) for c in internal.cidr_ranges} == {
        (ANY_ADDRESS, 32),
        ("::", 128),
    }
    assert hcm.generate_request_id is not False
    assert hcm.preserve_external_request_id is False


def test_connection_manager_normalises_paths_and_refuses_tricks(hcm: HttpConnectionManager) -> None:
    """Paths are normalised and merged; escaped slashes and underscored headers are refused."""
    assert hcm.normalize_path is True
    assert hcm.merge_slashes is True
    assert (
        hcm.path_with_escaped_slashes_action
        == HttpConnectionManagerPathWithEscapedSlashesAction.REJECT_REQUEST
    )
    assert hcm.common_http_protocol_options is not None
    assert (
        hcm.common_http_protocol_options.headers_with_underscores_action
        == HttpProtocolOptionsHeadersWithUnderscoresAction.REJECT_REQUEST
    )


def test_the_clients_forwarded_for_is_removed_first(hcm: HttpConnectionManager) -> None:
    """Before routing and filters only x-forwarded-for goes: client copies of x-orrery-* reach
    the hygiene filter, which refuses them (stripped, they would be served unnoticed)."""
    (extension,) = hcm.early_header_mutation_extensions
    mutations = extension.typed_config.unpack().mutations
    assert [m.remove for m in mutations] == ["x-forwarded-for"]


def test_the_hygiene_filter_refuses_reserved_headers_and_query_tokens(
    http_filters: dict[str, Any],
) -> None:
    """The Lua filter runs on every route (no per-route switch) and names both refusals."""
    source = http_filters[LUA].default_source_code.inline_string
    for needle in ('"x-orrery-"', '"x-orrery-hop"', '"reserved_header"', '"invalid_request"'):
        assert needle in source
    assert 'name:lower() == "access_token"' in source


def test_timeouts_bound_requests_but_keep_sse_streams_alive(
    hcm: HttpConnectionManager, routes: dict[str, Route]
) -> None:
    """Requests must arrive promptly; a2a responses may stream (no total deadline, idle bound)."""
    assert hcm.request_headers_timeout is not None
    assert datetime.timedelta(0) < hcm.request_headers_timeout <= datetime.timedelta(seconds=30)
    assert hcm.request_timeout is not None
    assert datetime.timedelta(0) < hcm.request_timeout <= datetime.timedelta(seconds=60)
    assert hcm.stream_idle_timeout is not None
    assert hcm.stream_idle_timeout >= datetime.timedelta(minutes=1)
    for name in ("a2a", "a2a_slash", *REST_ROUTES):
        action = routes[name].route
        assert action is not None
        assert action.timeout == datetime.timedelta(0), name  # 0 = no deadline for SSE
        assert action.idle_timeout is not None and action.idle_timeout > datetime.timedelta(0)
        assert action.max_stream_duration is not None
        longest = action.max_stream_duration.max_stream_duration
        assert longest is not None and longest >= datetime.timedelta(minutes=10)
    for name in ("agent_card", "approvals"):
        action = routes[name].route
        assert action is not None and action.timeout is not None
        assert datetime.timedelta(0) < action.timeout <= datetime.timedelta(seconds=60), name


def test_request_headers_and_bodies_are_capped(
    hcm: HttpConnectionManager, http_filters: dict[str, Any]
) -> None:
    """Header bytes/count and the request body have caps; the body cap is the adapter's: the
    longest legal message in the worst escaping, plus room for the rest (docs/contract.md)."""
    assert hcm.max_request_headers_kb is not None and 8 < hcm.max_request_headers_kb <= 64
    assert hcm.common_http_protocol_options is not None
    assert hcm.common_http_protocol_options.max_headers_count is not None
    assert hcm.common_http_protocol_options.max_headers_count <= 100
    assert http_filters[BUFFER].max_request_bytes == MAX_BODY_BYTES


def test_buffering_before_authz_is_bounded(
    bootstrap: Bootstrap, hcm: HttpConnectionManager, http_filters: dict[str, Any]
) -> None:
    """What one connection or stream may make Envoy hold before authz has said yes is bounded:
    every listener's and cluster's read buffers, the body the buffer filter holds (it runs
    before ext_authz), HTTP/2 windows and streams per connection."""
    for listener in bootstrap.static_resources.listeners:
        limit = listener.per_connection_buffer_limit_bytes
        assert limit is not None and 0 < limit <= 64 * 1024, listener.name
    for cluster in bootstrap.static_resources.clusters:
        limit = cluster.per_connection_buffer_limit_bytes
        assert limit is not None and 0 < limit <= 64 * 1024, cluster.name
    assert 0 < http_filters[BUFFER].max_request_bytes <= 1024 * 1024
    names = [f.name for f in hcm.http_filters]
    assert names.index(BUFFER) < names.index(EXT_AUTHZ)
    h2 = hcm.http2_protocol_options
    assert h2 is not None
    assert h2.initial_stream_window_size is not None
    assert h2.initial_stream_window_size <= 64 * 1024
    assert h2.initial_connection_window_size is not None
    assert h2.initial_connection_window_size <= 1024 * 1024
    assert h2.max_concurrent_streams is not None and h2.max_concurrent_streams <= 100


def test_envoy_sheds_load_by_heap_before_it_runs_out(bootstrap: Bootstrap) -> None:
    """An overload manager watches a fixed heap budget: shrink the heap first, then reset the
    streams holding the most memory, then stop accepting requests (503 overloaded), below 100 %."""
    overload = bootstrap.overload_manager
    assert overload is not None
    monitors = {m.name: m.typed_config.unpack() for m in overload.resource_monitors}
    assert monitors[FIXED_HEAP].max_heap_size_bytes == 1024**3
    assert "envoy.resource_monitors.global_downstream_max_connections" in monitors
    actions = {a.name: a.triggers for a in overload.actions}
    assert set(actions) == {
        "envoy.overload_actions.shrink_heap",
        "envoy.overload_actions.reset_high_memory_stream",
        "envoy.overload_actions.stop_accepting_requests",
    }
    for triggers in actions.values():
        assert [t.name for t in triggers] == [FIXED_HEAP]
    (shrink,) = actions["envoy.overload_actions.shrink_heap"]
    (reset,) = actions["envoy.overload_actions.reset_high_memory_stream"]
    (stop,) = actions["envoy.overload_actions.stop_accepting_requests"]
    assert shrink.threshold is not None and stop.threshold is not None
    assert reset.scaled is not None
    assert shrink.threshold.value <= reset.scaled.scaling_threshold < stop.threshold.value
    assert stop.threshold.value < reset.scaled.saturation_threshold < 1.0
    # reset_high_memory_stream needs stream memory accounting; streams from 64 KiB up count.
    assert overload.buffer_factory_config is not None
    assert overload.buffer_factory_config.minimum_account_to_track_power_of_two == 16


def test_unauthenticated_work_is_bounded_per_client_address(http_filters: dict[str, Any]) -> None:
    """Before authz, each client address (the real peer: use_remote_address, no trusted hops)
    has a token bucket — 100 requests a second, 200 at once by default — enforced for every
    request; buckets for up to 10 000 addresses."""
    limit = http_filters[LOCAL_RATE_LIMIT]
    assert limit.status is None  # 429
    for fraction in (limit.filter_enabled, limit.filter_enforced):
        assert fraction is not None
        assert fraction.default_value.numerator == 100
        assert fraction.default_value.denominator == 0  # HUNDRED
    assert limit.token_bucket is None  # no shared bucket: only per-address ones
    assert limit.always_consume_default_token_bucket is False
    assert limit.local_rate_limit_per_downstream_connection is False
    (rate_limit,) = limit.rate_limits
    (action,) = rate_limit.actions
    assert action.remote_address is not None
    (descriptor,) = limit.descriptors
    assert [(e.key, e.value) for e in descriptor.entries] == [("remote_address", "")]
    bucket = descriptor.token_bucket
    assert (bucket.max_tokens, bucket.tokens_per_fill) == (200, 5)
    assert bucket.fill_interval == datetime.timedelta(milliseconds=50)
    assert limit.max_dynamic_descriptors == 10_000


def test_access_log_records_no_query_and_no_credentials(hcm: HttpConnectionManager) -> None:
    """One JSON line per request: the path without query or fragment, no authorization or
    cookie, the request id the answer carries."""
    (access_log,) = hcm.access_log
    log_format = access_log.typed_config.unpack().log_format
    fields = log_format.json_format.to_dict()
    assert fields["path"] == "%CEL(request.url_path.contains('#') ? '-' : request.url_path)%"
    assert "request.headers['x-request-id']" in fields["request_id"]
    assert not log_format.formatters  # %CEL()% is built in (1.40 warns when it is listed)
    # Request headers logged verbatim: only :method, never a credential or the full :path.
    logged = {
        name.lower() for value in fields.values() for name in re.findall(r"%REQ\((.+?)\)%", value)
    }
    assert logged == {":method"}
    cel = " ".join(re.findall(r"%CEL\((.+?)\)%", " ".join(fields.values())))
    assert set(re.findall(r"request\.(\w+)", cel)) == {"headers", "url_path"}
    assert set(re.findall(r"request\.headers\['([^']+)'\]", cel)) == {"x-request-id"}


ADD_IF_ABSENT = HeaderValueOptionHeaderAppendAction.ADD_IF_ABSENT
NOT_ENVOYS_OWN = "['ext_authz_denied', 'direct_response', 'lua_response']"
# (what a mapper matches, the reason it answers, its Retry-After), in mapper order.
MAPPERS = [
    ("response.code_details == 'path_normalization_failed'", "bad_path", None),
    ("response.code_details == 'http1.unexpected_underscore'", "bad_header_name", None),
    ("response.code == 431", "headers_too_large", None),
    ("response.code == 426", "upgrade_required", None),
    ("response.code == 408", "request_timeout", None),
    ("response.code_details == 'ext_authz_error'", "authz_unavailable", "5"),
    ("response.code_details == 'ext_authz_invalid'", "authz_invalid_response", None),
    ("UF,UH,UO,URX,UC", "upstream_unavailable", "5"),
    ("UT,SI", "timeout", None),
    ("response.code_details == 'request_payload_too_large'", "body_too_large", None),
    ("response.code_details == 'local_rate_limited'", "address_rate_limited", "1"),
    ("response.code_details == 'overload'", "overloaded", "10"),
    (
        "response.code >= 400 && response.code < 500"
        f" && !(response.code_details in {NOT_ENVOYS_OWN})",
        "bad_request",
        None,
    ),
    (f"response.code >= 500 && !(response.code_details in {NOT_ENVOYS_OWN})", "edge_error", None),
]


def test_envoys_own_errors_are_json_and_never_rewrite_authz_denials(
    hcm: HttpConnectionManager,
) -> None:
    """Each local-reply mapper matches what Envoy decided itself (code details, a status only
    Envoy sends, a response flag other than UAEX; the catch-alls exclude authz's denials and the
    routes' and hygiene filter's own JSON) and answers JSON, no-store, with a request id."""
    assert hcm.local_reply_config is not None
    assert hcm.local_reply_config.body_format is None  # nothing rewrites every local reply
    found = []
    for mapper in hcm.local_reply_config.mappers:
        if mapper.status_code is not None:  # a carrier of authz's HTTP transport (below)
            continue
        flags = mapper.filter.response_flag_filter
        if flags is not None:
            assert "UAEX" not in flags.flags  # authz's denials carry UAEX
            matches = ",".join(flags.flags)
        else:
            matches = mapper.filter.extension_filter.typed_config.unpack().expression
        body = mapper.body_format_override
        assert body.content_type == "application/json"
        fields = body.json_format.to_dict()
        assert set(fields) == {"error", "error_description"}
        headers = {h.header.key: (h.header.value, h.append_action) for h in mapper.headers_to_add}
        assert headers["cache-control"][0] == "no-store"
        assert headers["x-request-id"] == ("%UNIQUE_ID%", ADD_IF_ABSENT)
        retry_after = headers.get("retry-after", (None,))[0]
        found.append((matches, fields["error"], retry_after))
    assert found == MAPPERS


def test_http_transport_carriers_get_their_real_status_back(hcm: HttpConnectionManager) -> None:
    """authz's HTTP transport sends a 5xx denial under a 4xx carrier (Envoy would read the 5xx
    as authz failing); a mapper per carrier restores the status, only for authz's denials, and
    changes nothing else."""
    assert hcm.local_reply_config is not None
    restored = {}
    for mapper in hcm.local_reply_config.mappers:
        if mapper.status_code is None:
            continue
        expression = mapper.filter.extension_filter.typed_config.unpack().expression
        denied, _, carrier = expression.partition(" && response.code == ")
        assert denied == "response.code_details == 'ext_authz_denied'"
        assert mapper.body_format_override is None
        assert not mapper.headers_to_add
        restored[mapper.status_code] = int(carrier)
    assert restored == dict(CARRIERS)


def test_every_answer_carries_its_request_id(hcm: HttpConnectionManager) -> None:
    """x-request-id is set on every response (a client's own was never kept)."""
    assert hcm.always_set_request_id_in_response is True


def test_a_known_paths_other_methods_are_405_with_allow(routes: dict[str, Route]) -> None:
    """After the card's and its keys' GET routes, /a2a's POST routes, each HTTP+JSON route and
    /approvals/'s GET and POST route, any other method on those paths (HEAD included) is a direct
    405 naming the allowed methods, without authz."""
    names = list(routes)
    expected = {
        "public_methods": ("card_keys", "GET"),
        "a2a_methods": ("a2a_slash", "POST"),
        **{after: (name, allow) for name, (_, _, after, allow) in REST_ROUTES.items()},
        "approvals_methods": ("approvals", "GET, POST"),
    }
    for name, (after, allow) in expected.items():
        route = routes[name]
        assert names.index(name) == names.index(after) + 1
        assert not route.match.headers  # every method
        assert route.direct_response is not None and route.direct_response.status == 405
        added = {h.header.key: h.header.value for h in route.response_headers_to_add}
        assert added["allow"] == allow
        assert json.loads(str(route.direct_response.body.inline_string))["error"] == (
            "method_not_allowed"
        )
        assert _per_route(route, EXT_AUTHZ).disabled is True
    public = routes["public_methods"].match.safe_regex.regex
    assert public == r"/\.well-known/(agent-card|jwks)\.json"
    assert routes["a2a_methods"].match.safe_regex.regex == "/a2a/?"
    for name, (regex, _, after, _) in REST_ROUTES.items():
        assert routes[after].match.safe_regex.regex == regex, name


def test_router_adds_no_envoy_headers(http_filters: dict[str, Any]) -> None:
    """No x-envoy-* timing headers leak to clients or upstreams."""
    assert http_filters["envoy.filters.http.router"].suppress_envoy_headers is True


# ---------------------------------------------------------------------------------------------
# The real Envoy


TRICKS: list[tuple[str, str, dict[str, str], int]] = [
    ("POST", "/a2a/..%2F", {}, 400),
    ("POST", "/a2a/..%2fapprovals", {}, 400),
    ("POST", "/approvals/x%5C..%5Ca2a", {}, 400),
    ("GET", "/.well-known/agent-card.json/..%2F..%2Fa2a", {}, 400),
    ("POST", "/A2A", {}, 404),
    ("POST", "/a2a;x", {}, 404),
    ("GET", "/a2a", {}, 405),
    ("POST", "/.well-known/agent-card.json", {}, 405),
    ("DELETE", "/approvals/act-1", {}, 405),
    ("GET", "/.well-known/agent-card.json", {"x_orrery_principal": "forged"}, 400),
    ("POST", "/a2a", {"x_forwarded_for": "1.2.3.4"}, 400),
]


@pytest.mark.envoy
async def test_unknown_path_is_a_404_from_envoy(
    tmp_path: Path, recorder: Recorder, closed_port: int
) -> None:
    """An unknown path gets Envoy's JSON 404; nothing reaches the upstream or authz."""
    async with envoy_for(tmp_path, authz_port=closed_port, adapter_port=recorder.port) as envoy:
        response = await raw_request(envoy.port, "GET", "/admin")
    assert response.status == 404
    assert response.body == b'{"error":"not_found","error_description":"no such endpoint"}'
    assert response.headers["content-type"] == "application/json"
    assert recorder.requests == []


@pytest.mark.envoy
async def test_diag_listener_serves_probes_and_metrics_and_nothing_else(
    tmp_path: Path, recorder: Recorder, closed_port: int
) -> None:
    """GET /healthz, /readyz (admin /ready) and /metrics (admin Prometheus stats) answer on the
    diag listener; no other admin endpoint is reachable through it, however spelled."""
    with bound_socket() as probe:  # a free port for the admin API, known before Envoy starts
        admin_port = probe.getsockname()[1]
    async with envoy_for(
        tmp_path, authz_port=closed_port, adapter_port=recorder.port, admin_port=admin_port
    ) as envoy:
        diag = await listener_port(envoy.admin, envoy_config.DIAG_LISTENER)
        healthz = await raw_request(diag, "GET", "/healthz")
        readyz = await raw_request(diag, "GET", "/readyz")
        metrics = await raw_request(diag, "GET", "/metrics")
        refused = {
            (method, path): (await raw_request(diag, method, path)).status
            for method, path in [
                ("GET", "/ready"),
                ("GET", "/stats/prometheus"),
                ("GET", "/config_dump"),
                ("GET", "/clusters"),
                ("POST", "/quitquitquit"),
                ("POST", "/healthcheck/fail"),
                ("POST", "/readyz"),
                ("POST", "/metrics"),
                ("GET", "/metrics/../config_dump"),
                ("GET", "/readyz/"),
                ("GET", "/READYZ"),
            ]
        }
        still_live = await raw_request(diag, "GET", "/readyz")
    assert (healthz.status, healthz.body) == (200, b'{"status":"ok"}')
    assert (readyz.status, readyz.body.strip()) == (200, b"LIVE")
    assert metrics.status == 200
    assert b"# TYPE envoy_server_live gauge" in metrics.body
    assert set(refused.values()) == {404}, refused
    assert still_live.status == 200
    assert recorder.requests == []


@pytest.mark.envoy
async def test_access_log_leaves_out_query_strings(
    tmp_path: Path, recorder: Recorder, closed_port: int
) -> None:
    """Whatever a client puts in a query string (a secret under any name) never reaches
    Envoy's log, nor what follows a `#`."""
    async with envoy_for(tmp_path, authz_port=closed_port, adapter_port=recorder.port) as envoy:
        response = await raw_request(envoy.port, "GET", "/nope?api_key=leaked-secret")
        assert response.status == 404
        fragment = await raw_request(envoy.port, "GET", "/nope#key=leaked-secret")
        assert fragment.status == 400
    lines = [line for line in envoy.log.read_text().splitlines() if '"event":"access"' in line]
    assert any('"path":"/nope"' in line for line in lines), lines
    assert "leaked-secret" not in envoy.log.read_text()


@pytest.mark.envoy
async def test_a_client_address_over_its_budget_is_refused_before_authz(
    tmp_path: Path, recorder: Recorder, fake_authz: FakeAuthz
) -> None:
    """With a budget of 5 (5 a second), the sixth quick request from 127.0.0.2 is 429
    address_rate_limited with Retry-After and never reaches authz, whatever x-forwarded-for it
    claims; 127.0.0.3 has a bucket of its own."""
    policy = EdgePolicy(client_rate=(5, 1), client_burst=5)
    async with envoy_for(
        tmp_path, authz_port=fake_authz.port, adapter_port=recorder.port, policy=policy
    ) as envoy:
        flood = [
            await raw_request(
                envoy.port, "POST", "/a2a", {"x-forwarded-for": f"198.51.100.{n}"}, source=SOURCE
            )
            for n in range(12)
        ]
        other = await raw_request(envoy.port, "POST", "/a2a", source="127.0.0.3")
    statuses = [response.status for response in flood]
    assert statuses[:5] == [200] * 5
    refused = [response for response in flood if response.status == 429]
    assert len(refused) >= 5  # at most one token refilled meanwhile (one per 200 ms)
    for response in refused:
        assert json.loads(response.body)["error"] == "address_rate_limited"
        assert response.headers["retry-after"] == "1"
        assert response.headers["x-request-id"]
    assert len(fake_authz.checks) == 12 - len(refused) + 1
    assert other.status == 200


async def _stat_reaches(envoy: RunningEnvoy, name: str, value: int = 1) -> None:
    """Wait until Envoy's gauge `name` is `value` (the overload manager samples every 250 ms)."""
    async with httpx.AsyncClient(timeout=10) as http:
        for _ in range(200):
            stats = await http.get(f"http://{envoy.admin}/stats", params={"format": "json"})
            if {"name": name, "value": value} in stats.json()["stats"]:
                return
            await asyncio.sleep(0.05)
    raise AssertionError(f"{name} never reached {value}")


@pytest.mark.envoy
async def test_over_its_heap_budget_envoy_refuses_new_requests_with_503(
    tmp_path: Path, recorder: Recorder, closed_port: int
) -> None:
    """A heap budget Envoy is already over (1 MiB): every action is on, and a request is 503
    overloaded with Retry-After, JSON, and forwarded nowhere."""
    policy = EdgePolicy(max_heap_bytes=1024 * 1024)
    async with envoy_for(
        tmp_path, authz_port=closed_port, adapter_port=recorder.port, policy=policy
    ) as envoy:
        await _stat_reaches(envoy, "overload.envoy.overload_actions.stop_accepting_requests.active")
        response = await raw_request(envoy.port, "GET", "/.well-known/agent-card.json")
    assert response.status == 503
    assert json.loads(response.body)["error"] == "overloaded"
    assert response.headers["retry-after"] == "10"
    assert recorder.requests == []


ALLOWED_ORIGIN = "https://console.example"


@pytest.mark.envoy
async def test_cors_preflights_are_answered_by_envoy_for_allowed_origins_only(
    tmp_path: Path, recorder: Recorder, fake_authz: FakeAuthz
) -> None:
    """With an origin opted in, Envoy answers its preflights on the card, /a2a, the HTTP+JSON
    operations and /approvals/ (methods, request headers, max age, never credentials); another
    origin's preflight gets no Access-Control-Allow-Origin, and one for a method the route does
    not take names only the route's methods: a browser stops either. Preflights reach neither
    authz nor the upstream."""
    policy = EdgePolicy(cors_origins=(ALLOWED_ORIGIN,))
    wanted = {
        "/.well-known/agent-card.json": "GET",
        "/a2a": "POST",
        "/a2a/": "POST",
        "/a2a/message:send": "POST",
        "/a2a/tasks/t-1:subscribe": "POST",
        "/a2a/tasks": "GET",
        "/a2a/tasks/t-1/pushNotificationConfigs": "POST",
        "/approvals/act-1": "POST",
    }
    async with envoy_for(
        tmp_path, authz_port=fake_authz.port, adapter_port=recorder.port, policy=policy
    ) as envoy:
        allowed = {
            path: await raw_request(
                envoy.port,
                "OPTIONS",
                path,
                {
                    "origin": "https://Console.Example",
                    "access-control-request-method": method,
                    "access-control-request-headers": "authorization,content-type,a2a-version",
                },
            )
            for path, method in wanted.items()
        }
        wrong_method = await raw_request(
            envoy.port,
            "OPTIONS",
            "/.well-known/agent-card.json",
            {"origin": ALLOWED_ORIGIN, "access-control-request-method": "POST"},
        )
        other = await raw_request(
            envoy.port,
            "OPTIONS",
            "/a2a",
            {"origin": "https://evil.example", "access-control-request-method": "POST"},
        )
    for path, response in allowed.items():
        assert response.status == 200, path
        assert response.headers["access-control-allow-origin"] == "https://Console.Example"
        assert "authorization" in response.headers["access-control-allow-headers"]
        assert response.headers["access-control-max-age"] == "600"
        assert "access-control-allow-credentials" not in response.headers
    assert allowed["/a2a"].headers["access-control-allow-methods"] == "POST"
    assert allowed["/approvals/act-1"].headers["access-control-allow-methods"] == "GET, POST"
    assert allowed["/a2a/message:send"].headers["access-control-allow-methods"] == "POST"
    assert allowed["/a2a/tasks"].headers["access-control-allow-methods"] == "GET"
    assert wrong_method.headers["access-control-allow-methods"] == "GET"  # a browser stops
    assert other.status == 200  # answered by Envoy, never forwarded
    assert "access-control-allow-origin" not in other.headers
    assert fake_authz.checks == []
    assert recorder.requests == []


@pytest.mark.envoy
async def test_cors_answers_let_an_allowed_page_read_replies_and_refusals(
    tmp_path: Path, recorder: Recorder, fake_authz: FakeAuthz
) -> None:
    """An allowed origin's requests get Access-Control-Allow-Origin and the exposed headers on
    the card, on an allowed /a2a call and on authz's refusal; Vary: Origin on the card. Another
    origin's get none. No file default: without a policy nothing is CORS-enabled."""
    policy = EdgePolicy(cors_origins=(ALLOWED_ORIGIN,))
    async with envoy_for(
        tmp_path, authz_port=fake_authz.port, adapter_port=recorder.port, policy=policy
    ) as envoy:
        origin = {"origin": ALLOWED_ORIGIN}
        card = await raw_request(envoy.port, "GET", "/.well-known/agent-card.json", origin)
        allowed = await raw_request(envoy.port, "POST", "/a2a", origin)
        fake_authz.answer = "deny"
        refused = await raw_request(envoy.port, "POST", "/a2a", origin)
        other = await raw_request(
            envoy.port, "GET", "/.well-known/agent-card.json", {"origin": "https://evil.example"}
        )
    for response in (card, allowed, refused):
        assert response.headers["access-control-allow-origin"] == ALLOWED_ORIGIN
        assert "x-request-id" in response.headers["access-control-expose-headers"]
        assert "www-authenticate" in response.headers["access-control-expose-headers"]
    assert refused.status == 401
    assert "origin" in card.headers["vary"].lower()
    assert "access-control-allow-origin" not in other.headers


@pytest.mark.envoy
async def test_without_origins_no_answer_is_cors_enabled(
    tmp_path: Path, recorder: Recorder, closed_port: int
) -> None:
    """The file as shipped: a preflight is not answered by Envoy, a card fetch carries no
    Access-Control-Allow-Origin, so a browser page on another origin can read nothing."""
    async with envoy_for(tmp_path, authz_port=closed_port, adapter_port=recorder.port) as envoy:
        origin = {"origin": ALLOWED_ORIGIN}
        preflight = await raw_request(
            envoy.port, "OPTIONS", "/a2a", {**origin, "access-control-request-method": "POST"}
        )
        card = await raw_request(envoy.port, "GET", "/.well-known/agent-card.json", origin)
    assert preflight.status == 405
    assert card.status == 200
    for response in (preflight, card):
        assert not [name for name in response.headers if name.startswith("access-control-")]


@pytest.mark.envoy
async def test_slow_authz_is_a_503(
    tmp_path: Path, recorder: Recorder, fake_authz: FakeAuthz
) -> None:
    """authz answering after the ext_authz timeout is an error: 503, nothing forwarded."""
    fake_authz.answer = "slow"
    async with envoy_for(tmp_path, authz_port=fake_authz.port, adapter_port=recorder.port) as envoy:
        response = await raw_request(envoy.port, "POST", "/a2a")
    assert response.status == 503
    assert json.loads(response.body)["error"] == "authz_unavailable"
    assert response.headers["retry-after"] == "5"
    assert len(fake_authz.checks) == 1
    assert recorder.requests == []


@pytest.mark.envoy
async def test_public_card_never_forwards_credential_or_hop_headers(
    tmp_path: Path, recorder: Recorder, closed_port: int
) -> None:
    """Authorization, Proxy-Authorization, Cookie and the hop header never reach it."""
    sent = {
        "x-orrery-hop": "1",
        "authorization": "Bearer secret-token",
        "proxy-authorization": "Basic eDp5",
        "cookie": "session=1",
    }
    async with envoy_for(tmp_path, authz_port=closed_port, adapter_port=recorder.port) as envoy:
        response = await raw_request(envoy.port, "GET", "/.well-known/agent-card.json", sent)
    assert response.status == 200
    (seen,) = recorder.requests
    names = {name.lower() for name in seen.headers}
    assert not {name for name in names if name.startswith("x-orrery-")}
    assert not names & {"authorization", "proxy-authorization", "cookie"}


RESERVED_NAMES = ["x-orrery-principal", "X-Orrery-Trace-Link", "x-orrery-anything", "x-orrery-"]
ROUTES = [("GET", "/.well-known/agent-card.json"), ("POST", "/a2a"), ("POST", "/approvals/act-1")]


@pytest.mark.envoy
async def test_reserved_headers_are_refused_by_envoy_before_authz(
    tmp_path: Path, recorder: Recorder, fake_authz: FakeAuthz
) -> None:
    """A client copy of any x-orrery-* but the hop is 400 reserved_header from Envoy itself, on
    every route: authz is not asked, the upstream sees nothing."""
    async with envoy_for(tmp_path, authz_port=fake_authz.port, adapter_port=recorder.port) as envoy:
        answers = [
            (method, path, name, await raw_request(envoy.port, method, path, {name: "forged"}))
            for method, path in ROUTES
            for name in RESERVED_NAMES
        ]
    for method, path, name, response in answers:
        assert response.status == 400, (method, path, name)
        assert json.loads(response.body)["error"] == "reserved_header", (method, path, name)
    assert fake_authz.checks == []
    assert recorder.requests == []


@pytest.mark.envoy
async def test_authz_gets_only_contract_headers_and_the_surface(
    tmp_path: Path, recorder: Recorder, fake_authz: FakeAuthz
) -> None:
    """Check carries authorization, x-request-id, trace and x-orrery-* headers, the client
    address Envoy trusts (the peer, whatever x-envoy-external-address the client sent) and the
    surface."""
    sent = {
        "authorization": "Bearer t",
        "x-envoy-external-address": "203.0.113.1",
        "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "x-orrery-hop": "1",
        "cookie": "session=1",
        "user-agent": "probe",
        "x-api-key": "k",
    }
    async with envoy_for(tmp_path, authz_port=fake_authz.port, adapter_port=recorder.port) as envoy:
        await raw_request(envoy.port, "POST", "/a2a", sent)
        await raw_request(envoy.port, "POST", "/approvals/act-1", sent)
    a2a, approvals = fake_authz.checks
    for check in (a2a, approvals):
        headers = set(check.attributes.request.http.headers)
        assert headers == {
            "authorization",
            "traceparent",
            "x-orrery-hop",
            "x-request-id",
            "x-envoy-external-address",
        }
        assert check.attributes.request.http.headers["x-envoy-external-address"] == "127.0.0.1"
        assert check.attributes.request.http.body == ""
    assert dict(a2a.attributes.context_extensions) == {"surface": "a2a"}
    assert dict(approvals.attributes.context_extensions) == {"surface": "approvals"}


@pytest.mark.envoy
async def test_client_request_id_and_envoy_controls_are_not_trusted(
    tmp_path: Path, recorder: Recorder, fake_authz: FakeAuthz
) -> None:
    """Envoy replaces a client's x-request-id and ignores its x-envoy-* control headers."""
    controls = {
        "x-request-id": "chosen-by-client",
        "x-envoy-upstream-rq-timeout-ms": "1",
        "x-envoy-retry-on": "5xx",
        "x-envoy-internal": "true",
        "x-forwarded-for": "203.0.113.9",
    }
    async with envoy_for(tmp_path, authz_port=fake_authz.port, adapter_port=recorder.port) as envoy:
        response = await raw_request(envoy.port, "POST", "/a2a", controls)
    assert response.status == 200
    (check,) = fake_authz.checks
    (seen,) = recorder.requests
    headers = {name.lower(): value for name, value in seen.headers.items()}
    request_id = check.attributes.request.http.headers["x-request-id"]
    assert request_id != "chosen-by-client"
    assert headers["x-request-id"] == request_id  # the id the assertion is bound to
    assert "x-envoy-upstream-rq-timeout-ms" not in headers
    assert "x-envoy-retry-on" not in headers
    assert "x-envoy-internal" not in headers
    assert "203.0.113.9" not in headers.get("x-forwarded-for", "")


@pytest.mark.envoy
async def test_authz_setting_a_header_outside_the_contract_is_a_500(
    tmp_path: Path, recorder: Recorder, fake_authz: FakeAuthz
) -> None:
    """Mutation rules turn an OK that touches another header into an error, not a pass."""
    fake_authz.answer = "mutate_other"
    async with envoy_for(tmp_path, authz_port=fake_authz.port, adapter_port=recorder.port) as envoy:
        response = await raw_request(envoy.port, "POST", "/a2a")
    assert response.status == 500
    assert json.loads(response.body)["error"] == "authz_invalid_response"
    assert recorder.requests == []


@pytest.mark.envoy
async def test_oversized_body_is_refused_before_authz(
    tmp_path: Path, recorder: Recorder, fake_authz: FakeAuthz
) -> None:
    """A body over the cap gets a JSON 413 from Envoy; authz and the adapter see nothing."""
    async with envoy_for(tmp_path, authz_port=fake_authz.port, adapter_port=recorder.port) as envoy:
        response = await raw_request(envoy.port, "POST", "/a2a", body=b"x" * (MAX_BODY_BYTES + 1))
    assert response.status == 413
    assert response.headers["content-type"] == "application/json"
    assert json.loads(response.body)["error"] == "body_too_large"
    assert fake_authz.checks == []
    assert recorder.requests == []


@pytest.mark.envoy
async def test_path_tricks_do_what_the_config_promises(
    tmp_path: Path, recorder: Recorder, fake_authz: FakeAuthz
) -> None:
    """Escaped slashes → 400, case/params mismatches → 404, a known path's wrong method → 405,
    underscores → 400; none reaches authz or the adapter."""
    async with envoy_for(tmp_path, authz_port=fake_authz.port, adapter_port=recorder.port) as envoy:
        results = [
            (method, path, (await raw_request(envoy.port, method, path, headers)).status)
            for method, path, headers, _ in TRICKS
        ]
    assert results == [(method, path, status) for method, path, _, status in TRICKS]
    assert fake_authz.checks == []
    assert recorder.requests == []


# (sent path, the path authz and the adapter see, the surface)
NORMALISED = [
    ("//a2a", "/a2a", "a2a"),
    ("/a2a/./", "/a2a/", "a2a"),
    ("/approvals/../a2a", "/a2a", "a2a"),
    ("/.well-known/../approvals/act-1", "/approvals/act-1", "approvals"),
    ("/%61%32%61", "/a2a", "a2a"),
]


@pytest.mark.envoy
async def test_normalised_paths_are_authorized_as_what_they_reach(
    tmp_path: Path, recorder: Recorder, fake_authz: FakeAuthz
) -> None:
    """Envoy normalises before routing, so authz sees the path and surface the adapter serves."""
    async with envoy_for(tmp_path, authz_port=fake_authz.port, adapter_port=recorder.port) as envoy:
        statuses = [
            (await raw_request(envoy.port, "POST", sent)).status for sent, _, _ in NORMALISED
        ]
    assert statuses == [200] * len(NORMALISED)
    seen_by_authz = [
        (check.attributes.request.http.path, check.attributes.context_extensions["surface"])
        for check in fake_authz.checks
    ]
    assert seen_by_authz == [(path, surface) for _, path, surface in NORMALISED]
    assert [seen.path for seen in recorder.requests] == [path for _, path, _ in NORMALISED]


def _non_loopback_address() -> str | None:
    """This host's address on its default route (a UDP connect sends nothing)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))
        except OSError:
            return None
        address = str(probe.getsockname()[0])
    return None if address.startswith("127.") or address == ANY_ADDRESS else address


@pytest.fixture
def host_address() -> Iterator[str]:
    address = _non_loopback_address()
    if address is None:
        pytest.skip("this machine has no non-loopback IPv4 address to connect to")
    yield address


@pytest.mark.envoy
async def test_file_default_listener_is_unreachable_from_other_addresses(
    tmp_path: Path, recorder: Recorder, closed_port: int, host_address: str
) -> None:
    """The file's loopback listener refuses a connection to the host's own network address."""
    async with envoy_for(tmp_path, authz_port=closed_port, adapter_port=recorder.port) as envoy:
        with pytest.raises(OSError):
            await asyncio.wait_for(asyncio.open_connection(host_address, envoy.port), 10)


@pytest.mark.envoy
async def test_rendered_container_listener_is_reachable_from_other_addresses(
    tmp_path: Path, recorder: Recorder, closed_port: int, host_address: str
) -> None:
    """Rendered with --listen 0.0.0.0 (compose), the same file answers on a network address."""
    async with envoy_for(
        tmp_path, authz_port=closed_port, adapter_port=recorder.port, listen_host=ANY_ADDRESS
    ) as envoy:
        response = await raw_request(
            envoy.port, "GET", "/.well-known/agent-card.json", host=host_address
        )
    assert response.status == 200
