"""`docker compose up --build` for our compose.yaml, on the Docker SDK (Compose v2 is not here).

Two halves. `load()` reads a compose file the way Compose does — YAML anchors and merge keys,
`${VAR}` interpolation, profiles, the project name — into frozen `Service` specs, and refuses every
key, value form and interpolation it does not implement (`ComposeError`) instead of ignoring it:
a key added to compose.yaml fails the tests until this file understands it. `Stack` runs a loaded
project on an engine: builds the images that have a `build:` (never pulls one that has not),
creates the project network and named volumes, starts services in dependency order waiting for
each `depends_on` condition, and restarts a service the way `docker compose restart` does
(dependants that declare `restart: true` follow).

What it implements is what compose.yaml uses; `SERVICE_KEYS` and friends list it. Every object it
creates carries Compose's own labels (`com.docker.compose.project`, `…service`) plus an owner
label (see `engine.owner_labels`) so a test run that died leaves nothing a later run cannot clean.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from tests.docker import engine

TOP_KEYS = frozenset({"name", "services", "volumes"})
SERVICE_KEYS = frozenset(
    {
        "build",
        "cap_drop",
        "command",
        "depends_on",
        "environment",
        "healthcheck",
        "image",
        "init",
        "network_mode",
        "ports",
        "profiles",
        "read_only",
        "restart",
        "security_opt",
        "stop_grace_period",
        "tmpfs",
        "user",
        "volumes",
    }
)
BUILD_KEYS = frozenset({"context", "dockerfile", "args"})
HEALTH_KEYS = frozenset({"test", "interval", "timeout", "retries", "start_period", "disable"})
DEPENDENCY_KEYS = frozenset({"condition", "required", "restart"})
CONDITIONS = frozenset({"service_started", "service_healthy", "service_completed_successfully"})
RESTART_POLICIES = frozenset({"no", "always", "unless-stopped", "on-failure"})
DEFAULT_STOP_GRACE = 10  # seconds: Compose's, when a service sets no stop_grace_period

# ${NAME}, ${NAME:-default}, ${NAME-default}, ${NAME:?message}, ${NAME?message}, $NAME, and $$.
_VARIABLE = re.compile(
    r"\$(?:(?P<escaped>\$)"
    r"|\{(?P<name>[A-Za-z_]\w*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}"
    r"|(?P<bare>[A-Za-z_]\w*)"
    r"|(?P<other>\{[^}]*\}?|.|$))"
)
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(h|ms|m|s|us|ns)")
_NANOSECONDS = {
    "h": 3_600_000_000_000,
    "m": 60_000_000_000,
    "s": 1_000_000_000,
    "ms": 1_000_000,
    "us": 1_000,
    "ns": 1,
}
_PORT = re.compile(r"(?:(?P<host_ip>[\d.]+|\[[0-9a-fA-F:]+\]):)?(?P<host>\d+):(?P<container>\d+)")


class ComposeError(Exception):
    """The file uses something this interpreter does not implement, or breaks a Compose rule."""


# ---------------------------------------------------------------------------------------------
# Reading the file


def interpolate(node: Any, env: Mapping[str, str], where: str = "") -> Any:
    """Compose's variable substitution over every string of a parsed file."""
    if isinstance(node, dict):
        return {key: interpolate(value, env, f"{where}.{key}") for key, value in node.items()}
    if isinstance(node, list):
        return [interpolate(value, env, f"{where}[{i}]") for i, value in enumerate(node)]
    if not isinstance(node, str):
        return node

    def substitute(match: re.Match[str]) -> str:
        if match["escaped"]:
            return "$"
        if match["other"] is not None:
            raise ComposeError(f"{where}: unsupported substitution ${match['other']}")
        name = match["name"] or match["bare"]
        value = env.get(name)
        op, arg = match["op"], match["arg"] or ""
        if "$" in arg:
            raise ComposeError(f"{where}: nested substitution in ${{{name}{op}{arg}}}")
        if op in (":?", "?") and (value is None or (op == ":?" and not value)):
            raise ComposeError(f"required variable {name} is missing a value: {arg}")
        if op == ":-" and not value:
            return arg
        if op == "-" and value is None:
            return arg
        return value or ""

    return _VARIABLE.sub(substitute, node)


def nanoseconds(duration: str) -> int:
    """A Compose duration (`10s`, `1m30s`, `250ms`) in nanoseconds."""
    parts = _DURATION.findall(duration)
    if not parts or "".join(number + unit for number, unit in parts) != duration:
        raise ComposeError(f"not a duration: {duration!r}")
    return sum(int(float(number) * _NANOSECONDS[unit]) for number, unit in parts)


def _refuse_unknown(where: str, mapping: Mapping[str, Any], known: Iterable[str]) -> None:
    if not isinstance(mapping, Mapping):
        raise ComposeError(f"{where}: expected a mapping, got {type(mapping).__name__}")
    unknown = sorted(set(mapping) - set(known))
    if unknown:
        raise ComposeError(f"{where}: unsupported key(s) {', '.join(unknown)}")


def _strings(where: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ComposeError(f"{where}: expected a list of strings (string forms are unsupported)")
    return tuple(value)


def _boolean(where: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ComposeError(f"{where}: expected true or false, got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class Build:
    context: Path
    dockerfile: str
    args: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class Health:
    test: tuple[str, ...]
    interval: int = 30_000_000_000
    timeout: int = 30_000_000_000
    retries: int = 3
    start_period: int = 0

    def for_sdk(self) -> dict[str, Any]:
        return {
            "test": list(self.test),
            "interval": self.interval,
            "timeout": self.timeout,
            "retries": self.retries,
            "start_period": self.start_period,
        }


@dataclass(frozen=True, slots=True)
class Dependency:
    condition: str
    required: bool = True
    restart: bool = False


@dataclass(frozen=True, slots=True)
class Port:
    host_ip: str
    host_port: int
    container_port: int


@dataclass(frozen=True, slots=True)
class Mount:
    source: str  # an absolute host path, or a named volume of the project
    target: str
    read_only: bool
    named: bool


@dataclass(frozen=True, slots=True)
class Service:
    name: str
    image: str
    build: Build | None = None
    command: tuple[str, ...] | None = None
    environment: Mapping[str, str] = field(default_factory=dict)
    user: str | None = None
    read_only: bool = False
    tmpfs: tuple[str, ...] = ()
    cap_drop: tuple[str, ...] = ()
    security_opt: tuple[str, ...] = ()
    restart: str = "no"
    init: bool = False
    network_mode: str | None = None
    ports: tuple[Port, ...] = ()
    volumes: tuple[Mount, ...] = ()
    depends_on: Mapping[str, Dependency] = field(default_factory=dict)
    healthcheck: Health | None = None
    health_disabled: bool = False
    profiles: tuple[str, ...] = ()
    stop_grace_period: int | None = None  # whole seconds: SIGTERM to SIGKILL on a stop/restart

    @property
    def pod(self) -> str | None:
        """The service whose network namespace this one joins (`network_mode: service:NAME`)."""
        if self.network_mode and self.network_mode.startswith("service:"):
            return self.network_mode.split(":", 1)[1]
        return None


def _build(where: str, spec: Any, directory: Path) -> Build:
    _refuse_unknown(where, spec, BUILD_KEYS)
    args = spec.get("args") or {}
    _refuse_unknown(f"{where}.args", args, args.keys())
    context = (directory / spec.get("context", ".")).resolve()
    return Build(
        context=context,
        dockerfile=str(spec.get("dockerfile", "Dockerfile")),
        args={str(key): str(value) for key, value in args.items()},
    )


def _health(where: str, spec: Any) -> tuple[Health | None, bool]:
    _refuse_unknown(where, spec, HEALTH_KEYS)
    if spec.get("disable"):
        if set(spec) != {"disable"}:
            raise ComposeError(f"{where}: disable: true takes no other key")
        return None, True
    test = _strings(f"{where}.test", spec.get("test"))
    if not test or test[0] not in ("CMD", "CMD-SHELL"):
        raise ComposeError(f"{where}.test: must start with CMD or CMD-SHELL")
    durations = {
        key: nanoseconds(str(spec[key]))
        for key in ("interval", "timeout", "start_period")
        if key in spec
    }
    retries = spec.get("retries", 3)
    if not isinstance(retries, int) or retries < 1:
        raise ComposeError(f"{where}.retries: expected a positive integer")
    return Health(test=test, retries=retries, **durations), False


def _dependencies(where: str, spec: Any) -> dict[str, Dependency]:
    if not isinstance(spec, Mapping):
        raise ComposeError(f"{where}: only the long (mapping) form is supported")
    dependencies = {}
    for name, rule in spec.items():
        _refuse_unknown(f"{where}.{name}", rule, DEPENDENCY_KEYS)
        condition = rule.get("condition", "service_started")
        if condition not in CONDITIONS:
            raise ComposeError(f"{where}.{name}.condition: unsupported {condition!r}")
        dependencies[name] = Dependency(
            condition=condition,
            required=_boolean(f"{where}.{name}.required", rule.get("required", True)),
            restart=_boolean(f"{where}.{name}.restart", rule.get("restart", False)),
        )
    return dependencies


def _port(where: str, text: Any) -> Port:
    match = _PORT.fullmatch(str(text))
    if not match:
        raise ComposeError(f"{where}: only [HOST_IP:]HOST_PORT:CONTAINER_PORT is supported")
    return Port(
        host_ip=(match["host_ip"] or "0.0.0.0").strip("[]"),
        host_port=int(match["host"]),
        container_port=int(match["container"]),
    )


def _mount(where: str, text: Any, directory: Path, volumes: Iterable[str]) -> Mount:
    parts = str(text).split(":")
    if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] not in ("ro", "rw")):
        raise ComposeError(f"{where}: only SOURCE:TARGET[:ro|rw] is supported")
    source, target = parts[0], parts[1]
    read_only = len(parts) == 3 and parts[2] == "ro"
    if source.startswith((".", "/")):
        path = (directory / source).resolve()
        if not path.exists():
            raise ComposeError(f"{where}: {source} does not exist")
        return Mount(str(path), target, read_only, named=False)
    if source not in volumes:
        raise ComposeError(f"{where}: volume {source!r} is not declared under top-level volumes")
    return Mount(source, target, read_only, named=True)


def _whole_seconds(where: str, value: Any) -> int:
    """A duration the engine can take as a container's stop timeout (whole seconds)."""
    seconds, remainder = divmod(nanoseconds(str(value)), 1_000_000_000)
    if remainder or seconds <= 0:
        raise ComposeError(f"{where}: only a positive whole number of seconds is supported")
    return seconds


def _restart(where: str, value: Any) -> str:
    policy = str(value)
    if policy.split(":", 1)[0] not in RESTART_POLICIES:
        raise ComposeError(f"{where}: unsupported restart policy {policy!r}")
    return policy


def _environment(where: str, spec: Any) -> dict[str, str]:
    if not isinstance(spec, Mapping):
        raise ComposeError(f"{where}: only the mapping form is supported")
    environment = {}
    for key, value in spec.items():
        if value is None or isinstance(value, dict | list):
            raise ComposeError(f"{where}.{key}: expected a scalar value")
        environment[str(key)] = str(value).lower() if isinstance(value, bool) else str(value)
    return environment


def parse_service(name: str, spec: Any, directory: Path, volumes: Iterable[str] = ()) -> Service:
    """One service's spec (already interpolated) as a `Service`, or a `ComposeError`."""
    where = f"services.{name}"
    _refuse_unknown(where, spec, SERVICE_KEYS)
    if "image" not in spec:
        raise ComposeError(f"{where}: an image name is required (this harness never guesses one)")
    healthcheck, disabled = (
        _health(f"{where}.healthcheck", spec["healthcheck"])
        if "healthcheck" in spec
        else (None, False)
    )
    network_mode = spec.get("network_mode")
    if (
        network_mode is not None
        and network_mode != "none"
        and not network_mode.startswith("service:")
    ):
        raise ComposeError(f"{where}.network_mode: only none and service:NAME are supported")
    return Service(
        name=name,
        image=str(spec["image"]),
        build=_build(f"{where}.build", spec["build"], directory) if "build" in spec else None,
        command=_strings(f"{where}.command", spec["command"]) if "command" in spec else None,
        environment=_environment(f"{where}.environment", spec.get("environment", {})),
        user=str(spec["user"]) if "user" in spec else None,
        read_only=_boolean(f"{where}.read_only", spec.get("read_only", False)),
        tmpfs=_strings(f"{where}.tmpfs", spec.get("tmpfs", [])),
        cap_drop=_strings(f"{where}.cap_drop", spec.get("cap_drop", [])),
        security_opt=_strings(f"{where}.security_opt", spec.get("security_opt", [])),
        restart=_restart(f"{where}.restart", spec.get("restart", "no")),
        init=_boolean(f"{where}.init", spec.get("init", False)),
        network_mode=network_mode,
        ports=tuple(
            _port(f"{where}.ports[{i}]", port) for i, port in enumerate(spec.get("ports", []))
        ),
        volumes=tuple(
            _mount(f"{where}.volumes[{i}]", volume, directory, volumes)
            for i, volume in enumerate(spec.get("volumes", []))
        ),
        depends_on=_dependencies(f"{where}.depends_on", spec.get("depends_on", {})),
        healthcheck=healthcheck,
        health_disabled=disabled,
        profiles=_strings(f"{where}.profiles", spec.get("profiles", [])),
        stop_grace_period=(
            _whole_seconds(f"{where}.stop_grace_period", spec["stop_grace_period"])
            if "stop_grace_period" in spec
            else None
        ),
    )


@dataclass(frozen=True, slots=True)
class Project:
    """The active services of a compose file, in the order they may start."""

    name: str
    directory: Path
    services: Mapping[str, Service]
    volumes: tuple[str, ...]

    def with_service(self, name: str, spec: Mapping[str, Any]) -> Project:
        """This project plus one service of the caller's (a test's dev issuer, say), parsed and
        checked like the file's own."""
        service = parse_service(name, dict(spec), self.directory, self.volumes)
        return _checked(replace(self, services={**self.services, name: service}))


def load(
    path: Path,
    env: Mapping[str, str],
    *,
    project: str | None = None,
    profiles: Iterable[str] | None = None,
) -> Project:
    """Read `path` as Compose would with `env` (and COMPOSE_PROFILES unless `profiles` is given).

    `project` overrides the file's `name` (Compose's `-p`)."""
    raw = yaml.safe_load(path.read_text())
    _refuse_unknown("(top level)", raw, {*TOP_KEYS, *(key for key in raw if key.startswith("x-"))})
    spec = interpolate({key: value for key, value in raw.items() if key in TOP_KEYS}, env)
    declared = spec.get("volumes") or {}
    for volume, options in declared.items():
        if options:
            raise ComposeError(f"volumes.{volume}: volume options are unsupported")
    active = set(
        profiles
        if profiles is not None
        else filter(None, env.get("COMPOSE_PROFILES", "").split(","))
    )
    services = {}
    for name, service_spec in (spec.get("services") or {}).items():
        service = parse_service(name, service_spec, path.parent, declared)
        if not service.profiles or active & set(service.profiles):
            services[name] = service
    return _checked(
        Project(
            name=project or spec.get("name") or path.parent.name,
            directory=path.parent,
            services=services,
            volumes=tuple(declared),
        )
    )


def _checked(project: Project) -> Project:
    """Drop optional dependencies on inactive services; refuse the rest of what Compose refuses."""
    services = {}
    for name, service in project.services.items():
        depends_on = {}
        for dependency, rule in service.depends_on.items():
            if dependency not in project.services:
                if rule.required:
                    raise ComposeError(f"services.{name}: depends on inactive {dependency!r}")
                continue
            target = project.services[dependency]
            if rule.condition == "service_healthy" and target.healthcheck is None:
                raise ComposeError(f"services.{name}: {dependency!r} has no health check")
            depends_on[dependency] = rule
        pod = service.pod
        if pod is not None and pod not in project.services:
            raise ComposeError(f"services.{name}.network_mode: no active service {pod!r}")
        if pod is not None and service.ports:
            raise ComposeError(f"services.{name}: ports belong to {pod!r}, whose network it uses")
        services[name] = replace(service, depends_on=depends_on)
    return replace(project, services=_in_start_order(services))


def _in_start_order(services: Mapping[str, Service]) -> dict[str, Service]:
    """Dependencies (and the owner of a joined network namespace) first, else file order."""
    ordered: dict[str, Service] = {}
    visiting: set[str] = set()

    def visit(name: str) -> None:
        if name in ordered:
            return
        if name in visiting:
            raise ComposeError(f"services.{name}: dependency cycle")
        visiting.add(name)
        service = services[name]
        for dependency in [*service.depends_on, *filter(None, [service.pod])]:
            visit(dependency)
        ordered[name] = service

    for name in services:
        visit(name)
    return ordered


# ---------------------------------------------------------------------------------------------
# Running it


def container_options(service: Service, project: Project, ids: Mapping[str, str]) -> dict[str, Any]:
    """The Docker SDK `containers.create` arguments for `service` (`ids`: started services)."""
    options: dict[str, Any] = {
        "name": f"{project.name}-{service.name}-1",
        "command": list(service.command) if service.command is not None else None,
        "environment": dict(service.environment),
        "user": service.user,
        "read_only": service.read_only,
        "tmpfs": dict.fromkeys(service.tmpfs, ""),
        "cap_drop": list(service.cap_drop),
        "security_opt": list(service.security_opt),
        "init": service.init or None,
        "restart_policy": _restart_policy(service.restart),
        "volumes": {
            (f"{project.name}_{mount.source}" if mount.named else mount.source): {
                "bind": mount.target,
                "mode": "ro" if mount.read_only else "rw",
            }
            for mount in service.volumes
        },
        "labels": {
            "com.docker.compose.project": project.name,
            "com.docker.compose.service": service.name,
            **engine.owner_labels(),
        },
    }
    if service.healthcheck is not None:
        options["healthcheck"] = service.healthcheck.for_sdk()
    elif service.health_disabled:
        options["healthcheck"] = {"test": ["NONE"]}
    if service.pod is not None:
        options["network_mode"] = f"container:{ids[service.pod]}"
    elif service.network_mode == "none":
        options["network_mode"] = "none"
    else:
        network = f"{project.name}_default"
        options["network"] = network
        options["networking_config"] = {
            network: engine.endpoint_config(aliases=[service.name]),
        }
    if service.ports:
        options["ports"] = {
            f"{port.container_port}/tcp": (port.host_ip, port.host_port) for port in service.ports
        }
    return options


def _restart_policy(policy: str) -> dict[str, Any]:
    name, _, retries = policy.partition(":")
    if name == "on-failure" and retries:
        return {"Name": name, "MaximumRetryCount": int(retries)}
    return {"Name": name}


@dataclass
class Stack:
    """A project running on an engine. `build_network`: the network builds run in (an engine
    without NAT, like CI's, reaches PyPI only from the host's)."""

    client: Any
    project: Project
    build_network: str | None = None
    containers: dict[str, Any] = field(default_factory=dict)
    _built: set[str] = field(default_factory=set)
    _network: Any = None
    _volumes: list[Any] = field(default_factory=list)

    def build(self) -> None:
        """`--build`: build every image with a `build:` once; every other image must be present."""
        for service in self.project.services.values():
            if service.build is not None:
                if service.image not in self._built:
                    engine.build_image(
                        self.client,
                        context=service.build.context,
                        dockerfile=service.build.dockerfile,
                        tag=service.image,
                        args=service.build.args,
                        network=self.build_network,
                    )
                    self._built.add(service.image)
            else:
                engine.require_image(self.client, service.image)

    def up(self, services: Iterable[str] | None = None) -> None:
        """Create what is missing and start `services` (default all) in dependency order."""
        if self._network is None:
            self._network = self.client.networks.create(
                f"{self.project.name}_default", labels=self._labels()
            )
            for volume in self.project.volumes:
                self._volumes.append(
                    self.client.volumes.create(
                        f"{self.project.name}_{volume}", labels=self._labels()
                    )
                )
        wanted = set(self.project.services if services is None else services)
        for name, service in self.project.services.items():
            if name not in wanted or name in self.containers:
                continue
            for dependency, rule in service.depends_on.items():
                if dependency not in self.containers:
                    raise ComposeError(f"{name}: start {dependency!r} first")
                self.wait(dependency, rule.condition)
            options = container_options(service, self.project, self.ids())
            container = self.client.containers.create(service.image, **options)
            self.containers[name] = container
            container.start()

    def ids(self) -> dict[str, str]:
        return {name: container.id for name, container in self.containers.items()}

    def _labels(self) -> dict[str, str]:
        return {"com.docker.compose.project": self.project.name, **engine.owner_labels()}

    def state(self, name: str) -> dict[str, Any]:
        container = self.containers[name]
        container.reload()
        return dict(container.attrs["State"])

    def wait(self, name: str, condition: str, timeout: float = 120.0) -> None:
        """Block until `name` meets a `depends_on` condition; fail with its log otherwise."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = self.state(name)
            if condition == "service_completed_successfully" and state["Status"] == "exited":
                if state["ExitCode"] != 0:
                    raise AssertionError(f"{name} exited {state['ExitCode']}: {self.logs(name)}")
                return
            health = (state.get("Health") or {}).get("Status")
            if condition == "service_healthy" and health == "healthy":
                return
            if condition == "service_started" and state["Status"] == "running":
                return
            time.sleep(0.5)
        raise AssertionError(f"{name}: not {condition} after {timeout:.0f} s: {self.logs(name)}")

    def restart(self, name: str) -> list[str]:
        """`docker compose restart NAME`: then every dependant that says `restart: true`.
        Returns the services restarted, in order."""
        grace = self.project.services[name].stop_grace_period
        self.containers[name].restart(timeout=grace or DEFAULT_STOP_GRACE)
        restarted = [name]
        for other, service in self.project.services.items():
            rule = service.depends_on.get(name)
            if rule is not None and rule.restart and other in self.containers:
                restarted += self.restart(other)
        return restarted

    def logs(self, name: str, tail: int = 40) -> str:
        return bytes(self.containers[name].logs(tail=tail)).decode(errors="replace")

    def down(self) -> None:
        """Remove the containers, the network and the named volumes (`down --volumes`)."""
        for container in reversed(list(self.containers.values())):
            engine.remove_quietly(container)
        self.containers.clear()
        for volume in self._volumes:
            engine.remove_quietly(volume)
        if self._network is not None:
            engine.remove_quietly(self._network)
            self._network = None
