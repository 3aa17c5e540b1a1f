"""tests/docker/compose.py: Compose's rules for the keys compose.yaml uses, and refusal of the rest.

Without an engine: interpolation, durations, profiles, dependency order, the refusals, and the
Docker SDK arguments each key becomes. The same translation is checked against what a real
engine runs in test_compose_stack.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.docker import compose, engine
from tests.docker.compose import ComposeError, interpolate, nanoseconds

COMPOSE = engine.REPO / "compose.yaml"


def write(tmp_path: Path, spec: dict[str, Any]) -> Path:
    path = tmp_path / "compose.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def load(tmp_path: Path, services: dict[str, Any], **top: Any) -> compose.Project:
    return compose.load(write(tmp_path, {"services": services, **top}), {})


@pytest.mark.parametrize(
    ("text", "env", "expected"),
    [
        ("${A}", {"A": "x"}, "x"),
        ("${A}", {}, ""),
        ("$A/b", {"A": "x"}, "x/b"),
        ("${A:-d}", {"A": ""}, "d"),
        ("${A-d}", {"A": ""}, ""),
        ("${A-d}", {}, "d"),
        ("${A:?no}", {"A": "x"}, "x"),
        ("${A?no}", {"A": ""}, ""),
        ("$${A}", {"A": "x"}, "${A}"),
        ("p${A:-127.0.0.1:8080}:8080", {}, "p127.0.0.1:8080:8080"),
    ],
)
def test_interpolation_follows_compose(text: str, env: dict[str, str], expected: str) -> None:
    """Each substitution form Compose documents, as Compose resolves it."""
    assert interpolate(text, env) == expected


@pytest.mark.parametrize(
    ("text", "env", "message"),
    [
        ("${A:?set A}", {"A": ""}, "required variable A is missing a value: set A"),
        ("${A?set A}", {}, "required variable A"),
        ("${A:+alt}", {}, "unsupported substitution"),
        ("${A:-${B}}", {}, "unsupported substitution|nested"),
        ("cost: $5", {}, "unsupported substitution"),
        ("trailing $", {}, "unsupported substitution"),
    ],
)
def test_interpolation_refuses_what_it_does_not_implement(
    text: str, env: dict[str, str], message: str
) -> None:
    """A missing required variable names itself; any other form is refused, not passed on."""
    with pytest.raises(ComposeError, match=message):
        interpolate(text, env)


def test_durations_are_compose_durations() -> None:
    """`10s`, `1m30s`, `250ms` in nanoseconds; anything else refused."""
    assert nanoseconds("10s") == 10_000_000_000
    assert nanoseconds("1m30s") == 90_000_000_000
    assert nanoseconds("250ms") == 250_000_000
    for bad in ("10", "ten s", "10s ", "1d"):
        with pytest.raises(ComposeError, match="not a duration"):
            nanoseconds(bad)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"services": {"a": {"image": "x"}}, "networks": {}}, r"\(top level\): unsupported key"),
        ({"services": {"a": {"image": "x", "privileged": True}}}, "services.a: unsupported key"),
        ({"services": {"a": {"image": "x", "build": {"target": "t"}}}}, "build: unsupported key"),
        (
            {
                "services": {
                    "a": {"image": "x", "healthcheck": {"test": ["CMD"], "start_interval": "1s"}}
                }
            },
            "healthcheck: unsupported key",
        ),
        (
            {"services": {"a": {"image": "x", "healthcheck": {"test": "curl x"}}}},
            "expected a list of strings",
        ),
        (
            {"services": {"a": {"image": "x", "depends_on": ["b"]}, "b": {"image": "x"}}},
            "only the long",
        ),
        (
            {
                "services": {
                    "a": {"image": "x", "depends_on": {"b": {"condition": "service_healthy"}}},
                    "b": {"image": "x"},
                }
            },
            "has no health check",
        ),
        (
            {
                "services": {
                    "a": {"image": "x", "depends_on": {"b": {"weight": 1}}},
                    "b": {"image": "x"},
                }
            },
            "depends_on.b: unsupported key",
        ),
        ({"services": {"a": {"image": "x", "restart": "sometimes"}}}, "unsupported restart"),
        ({"services": {"a": {"image": "x", "command": "sleep 1"}}}, "string forms are unsupported"),
        ({"services": {"a": {"image": "x", "environment": ["A=1"]}}}, "only the mapping form"),
        ({"services": {"a": {"image": "x", "environment": {"A": None}}}}, "expected a scalar"),
        ({"services": {"a": {"image": "x", "ports": ["8080-8081:80"]}}}, "HOST_PORT:CONTAINER"),
        ({"services": {"a": {"image": "x", "ports": ["80/udp"]}}}, "HOST_PORT:CONTAINER"),
        ({"services": {"a": {"image": "x", "volumes": ["data:/d"]}}}, "not declared"),
        ({"services": {"a": {"image": "x", "volumes": ["./missing:/d"]}}}, "does not exist"),
        (
            {"services": {"a": {"image": "x", "volumes": ["v:/d:z"]}}, "volumes": {"v": None}},
            "SOURCE:TARGET",
        ),
        (
            {"services": {"a": {"image": "x"}}, "volumes": {"v": {"driver": "nfs"}}},
            "options are unsupported",
        ),
        ({"services": {"a": {"image": "x", "network_mode": "host"}}}, "only none and service:NAME"),
        ({"services": {"a": {"image": "x", "network_mode": "service:b"}}}, "no active service 'b'"),
        ({"services": {"a": {"image": "x", "read_only": "yes"}}}, "expected true or false"),
        ({"services": {"a": {"build": {"context": "."}}}}, "an image name is required"),
        (
            {
                "services": {
                    "a": {"image": "x", "depends_on": {"b": {"condition": "service_started"}}},
                    "b": {"image": "x", "depends_on": {"a": {"condition": "service_started"}}},
                }
            },
            "dependency cycle",
        ),
        (
            {
                "services": {
                    "holder": {"image": "x"},
                    "member": {"image": "x", "network_mode": "service:holder", "ports": ["1:1"]},
                }
            },
            "ports belong to 'holder'",
        ),
    ],
)
def test_what_it_does_not_implement_is_refused(
    tmp_path: Path, spec: dict[str, Any], message: str
) -> None:
    """An unknown key, value form or rule is an error, never silently ignored."""
    with pytest.raises(ComposeError, match=message):
        compose.load(write(tmp_path, spec), {})


def test_profiles_decide_which_services_run(tmp_path: Path) -> None:
    """Without the profile its services are gone and optional dependencies on them dropped; a
    required dependency on an inactive service is an error; COMPOSE_PROFILES turns it on."""
    rule: dict[str, Any] = {"condition": "service_started", "required": False}
    spec = {
        "services": {
            "app": {"image": "x", "depends_on": {"db": rule}},
            "db": {"image": "x", "profiles": ["stores"]},
        }
    }
    path = write(tmp_path, spec)
    plain = compose.load(path, {})
    assert list(plain.services) == ["app"]
    assert plain.services["app"].depends_on == {}
    with_stores = compose.load(path, {"COMPOSE_PROFILES": "other,stores"})
    assert list(with_stores.services) == ["db", "app"]
    rule["required"] = True
    with pytest.raises(ComposeError, match="depends on inactive 'db'"):
        compose.load(write(tmp_path, spec), {})


def test_services_start_after_their_dependencies_and_namespace_owner(tmp_path: Path) -> None:
    """Dependencies and the owner of a joined namespace first; otherwise file order."""
    project = load(
        tmp_path,
        {
            "member": {"image": "x", "network_mode": "service:holder"},
            "late": {"image": "x", "depends_on": {"member": {"condition": "service_started"}}},
            "holder": {"image": "x"},
            "alone": {"image": "x"},
        },
    )
    assert list(project.services) == ["holder", "member", "late", "alone"]


def test_anchors_merge_keys_and_extension_fields_are_compose_yaml(tmp_path: Path) -> None:
    """`x-` blocks are templates, `<<:` merges them, and a service's own key wins."""
    path = tmp_path / "compose.yaml"
    path.write_text(
        "x-base: &base\n  image: x\n  restart: always\n"
        "services:\n  a:\n    <<: *base\n    restart: 'no'\n"
    )
    (service,) = compose.load(path, {}).services.values()
    assert (service.image, service.restart) == ("x", "no")


def test_container_options_for_every_key(tmp_path: Path) -> None:
    """Each key as the Docker SDK argument Compose would give the engine."""
    (tmp_path / "conf").mkdir()
    spec: dict[str, Any] = {
        "name": "demo",
        "services": {
            "holder": {
                "image": "app:1",
                "build": {"context": ".", "dockerfile": "D", "args": {"BASE": "b:1"}},
                "command": ["sleep", "infinity"],
                "init": True,
                "ports": ["127.0.0.1:18080:8080"],
                "healthcheck": {"disable": True},
            },
            "member": {
                "image": "app:1",
                "user": "10001:10001",
                "read_only": True,
                "tmpfs": ["/tmp"],
                "cap_drop": ["ALL"],
                "security_opt": ["no-new-privileges:true"],
                "restart": "unless-stopped",
                "stop_grace_period": "20s",
                "network_mode": "service:holder",
                "environment": {"A": "1", "B": 2},
                "volumes": ["./conf:/etc/conf:ro", "state:/srv/state"],
                "depends_on": {"holder": {"condition": "service_started", "restart": True}},
                "healthcheck": {
                    "test": ["CMD", "true"],
                    "interval": "10s",
                    "timeout": "5s",
                    "retries": 3,
                    "start_period": "20s",
                },
            },
            "job": {
                "image": "app:1",
                "network_mode": "none",
                "profiles": ["jobs"],
                "restart": "on-failure:3",
            },
        },
        "volumes": {"state": None},
    }
    project = compose.load(write(tmp_path, spec), {}, profiles=["jobs"])
    used = {key for service in spec["services"].values() for key in service}
    assert used == compose.SERVICE_KEYS  # every key the interpreter accepts is exercised here
    holder, member, job = (project.services[name] for name in ("holder", "member", "job"))
    assert holder.build == compose.Build(tmp_path.resolve(), "D", {"BASE": "b:1"})
    assert member.depends_on == {"holder": compose.Dependency("service_started", True, True)}
    assert member.stop_grace_period == 20  # the timeout `restart` gives it
    assert job.profiles == ("jobs",)

    options = compose.container_options(holder, project, {})
    labels = options.pop("labels")
    assert labels["com.docker.compose.project"] == "demo"
    assert labels["com.docker.compose.service"] == "holder"
    assert engine.OWNER_LABEL in labels
    endpoint = options.pop("networking_config")["demo_default"]
    assert endpoint["Aliases"] == ["holder"]
    assert options == {
        "name": "demo-holder-1",
        "command": ["sleep", "infinity"],
        "environment": {},
        "user": None,
        "read_only": False,
        "tmpfs": {},
        "cap_drop": [],
        "security_opt": [],
        "init": True,
        "restart_policy": {"Name": "no"},
        "volumes": {},
        "healthcheck": {"test": ["NONE"]},
        "network": "demo_default",
        "ports": {"8080/tcp": ("127.0.0.1", 18080)},
    }

    options = compose.container_options(member, project, {"holder": "c0ffee"})
    options.pop("labels")
    assert options == {
        "name": "demo-member-1",
        "command": None,
        "environment": {"A": "1", "B": "2"},
        "user": "10001:10001",
        "read_only": True,
        "tmpfs": {"/tmp": ""},
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges:true"],
        "init": None,
        "restart_policy": {"Name": "unless-stopped"},
        "volumes": {
            str((tmp_path / "conf").resolve()): {"bind": "/etc/conf", "mode": "ro"},
            "demo_state": {"bind": "/srv/state", "mode": "rw"},
        },
        "healthcheck": {
            "test": ["CMD", "true"],
            "interval": 10_000_000_000,
            "timeout": 5_000_000_000,
            "retries": 3,
            "start_period": 20_000_000_000,
        },
        "network_mode": "container:c0ffee",
    }

    options = compose.container_options(job, project, {})
    assert (options["network_mode"], options["restart_policy"]) == (
        "none",
        {"Name": "on-failure", "MaximumRetryCount": 3},
    )


def test_compose_yaml_uses_only_keys_whose_translation_is_tested() -> None:
    """Every key of every service in compose.yaml is one the translation test exercises, and
    the file loads under every profile."""
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    used = {key for spec in services.values() for key in spec}
    assert used <= compose.SERVICE_KEYS, used - compose.SERVICE_KEYS
    env = {
        "ORRERY_A2A_JWT_ISSUER": "https://i",
        "ORRERY_A2A_ASSERTION_KEYS": "k=x",
        "ORRERY_CONSOLE_CLIENTS": "c",
    }
    for profiles in ([], ["replicated"]):
        assert compose.load(COMPOSE, env, profiles=profiles).services


def test_with_service_checks_a_test_service_like_the_files_own(tmp_path: Path) -> None:
    """A test's extra service is parsed by the same rules: a bad key is refused."""
    project = load(tmp_path, {"holder": {"image": "x"}})
    joined = project.with_service("extra", {"image": "x", "network_mode": "service:holder"})
    assert list(joined.services) == ["holder", "extra"]
    with pytest.raises(ComposeError, match=r"services\.extra: unsupported key"):
        project.with_service("extra", {"image": "x", "privileged": True})
