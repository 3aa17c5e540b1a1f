"""tests/docker/pod.py, and why compose.yaml's pod has a holder that does nothing.

Members of a pod share one loopback and are reached from outside through the holder's published
ports. A container joined to another's namespace keeps the namespace it joined: when that owner
restarts, it gets a new one and the member is left behind, which is the trap compose.yaml avoids
by letting a process that never restarts own the namespace.
"""

from __future__ import annotations

import os
import time
from typing import Any

import httpx
import pytest

from tests.docker import engine
from tests.docker.pod import LOCKED_DOWN, running_pod

pytestmark = pytest.mark.docker

SERVE = ["python3", "-m", "http.server", "--directory", "/etc"]


def _unique() -> str:
    return f"orrery-pod-{os.urandom(4).hex()}"


def _fetch(container: Any, url: str) -> int:
    """Exit code of fetching `url` from inside `container` (0: it answered)."""
    code = f"import urllib.request; urllib.request.urlopen({url!r}, timeout=3)"
    return int(container.exec_run(["python3", "-c", code]).exit_code)


def _wait_for(check: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def test_members_share_loopback_and_the_host_reaches_published_ports(
    docker_client: Any, stand_ins: dict[str, str]
) -> None:
    """A member listening on 127.0.0.1 is reached by another member, not from outside; one on
    0.0.0.0 is reached from the host through the holder's published port."""
    image = stand_ins["ORRERY_PYTHON_IMAGE"]
    with running_pod(
        docker_client, _unique(), image=image, ports={8000: engine.free_port()}
    ) as pod:
        pod.run("inner", image, command=[*SERVE, "--bind", "127.0.0.1", "9000"])
        # Inside the pod's namespace; only the holder's published port leads here.
        pod.run("outer", image, command=[*SERVE, "--bind", "0.0.0.0", "8000"])
        client = pod.run("client", image, command=["sleep", "infinity"])
        _wait_for(lambda: _fetch(client, "http://127.0.0.1:9000/hostname") == 0)
        _wait_for(lambda: _answers(pod.url(8000)))
        assert {c.attrs["HostConfig"]["NetworkMode"] for c in pod.members.values()} == {
            f"container:{pod.holder.id}"
        }


def _answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/hostname", timeout=3).status_code == 200
    except httpx.HTTPError:
        return False


def test_a_member_survives_another_members_restart(
    docker_client: Any, stand_ins: dict[str, str]
) -> None:
    """With a holder owning the namespace, a restarted member rejoins it: the others reach it
    again on loopback."""
    image = stand_ins["ORRERY_PYTHON_IMAGE"]
    with running_pod(docker_client, _unique(), image=image, ports={}) as pod:
        server = pod.run("server", image, command=[*SERVE, "--bind", "127.0.0.1", "9000"])
        client = pod.run("client", image, command=["sleep", "infinity"])
        _wait_for(lambda: _fetch(client, "http://127.0.0.1:9000/hostname") == 0)
        server.restart(timeout=1)
        _wait_for(lambda: _fetch(client, "http://127.0.0.1:9000/hostname") == 0)


def test_a_member_of_a_restarted_namespace_owner_is_left_in_a_dead_namespace(
    docker_client: Any, stand_ins: dict[str, str]
) -> None:
    """The trap: when the container owning the namespace restarts (as Envoy did when it owned
    compose's), a member keeps the old namespace and never reaches it again."""
    image = stand_ins["ORRERY_PYTHON_IMAGE"]
    labels = engine.owner_labels()
    command = [*SERVE, "--bind", "127.0.0.1", "9000"]
    with engine.temporary(docker_client, "containers", image, command, **LOCKED_DOWN) as owner:
        owner.start()
        member = docker_client.containers.run(
            image,
            ["sleep", "infinity"],
            network_mode=f"container:{owner.id}",
            labels=labels,
            detach=True,
            **LOCKED_DOWN,
        )
        try:
            _wait_for(lambda: _fetch(member, "http://127.0.0.1:9000/hostname") == 0)
            owner.restart(timeout=1)
            _wait_for(lambda: _fetch(owner, "http://127.0.0.1:9000/hostname") == 0)
            assert _fetch(member, "http://127.0.0.1:9000/hostname") != 0
        finally:
            engine.remove_quietly(member)
