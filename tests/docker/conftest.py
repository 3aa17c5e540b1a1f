"""Fixtures of the docker tests: the engine, the stand-in images, the app image.

Without an engine every test here skips and says how to start one (`scripts/docker-env up`);
under `ORRERY_TEST_REQUIRE_SERVICES=1` (CI) it fails instead. The helpers behind these fixtures
live in `tests.docker.engine`, `tests.docker.compose` and `tests.docker.pod`.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.docker import engine


@pytest.fixture(scope="session")
def docker_client() -> Iterator[Any]:
    """A client of a running engine; leftovers of test runs that died are removed first."""
    client = engine.require_engine()
    engine.prune_stale(client)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture(scope="session")
def stand_ins(docker_client: Any) -> dict[str, str]:
    """compose.yaml's image variables → images present on the engine."""
    images = engine.stand_in_images()
    for image in images.values():
        engine.require_image(docker_client, image)
    return images


@dataclass(frozen=True)
class AppImage:
    tag: str
    version: str
    revision: str
    source: str


@pytest.fixture(scope="session")
def app_image(docker_client: Any, stand_ins: dict[str, str]) -> AppImage:
    """The project's image as a release would build it: version, revision and source labels."""
    image = AppImage(
        tag=f"orrery-a2a-edge:test-{engine.context_digest()}",
        version=importlib.metadata.version("orrery-a2a-edge"),
        revision=engine.git_revision(),
        source="https://example.invalid/orrery-a2a-edge",
    )
    engine.build_image(
        docker_client,
        context=engine.REPO,
        dockerfile="Dockerfile",
        tag=image.tag,
        args={
            "PYTHON_IMAGE": stand_ins["ORRERY_PYTHON_IMAGE"],
            "VERSION": image.version,
            "REVISION": image.revision,
            "SOURCE": image.source,
        },
        network=engine.BUILD_NETWORK,
    )
    return image
