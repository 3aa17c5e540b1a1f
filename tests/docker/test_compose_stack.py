"""compose.yaml on a real engine, used the way a person would use it.

One stack per profile (module fixtures): built from the Dockerfile, run from compose.yaml through
`tests.docker.compose`, called through its one published port with plain HTTP and with the stack's
own a2a-sdk client. Then every container is restarted the way `docker compose restart` does it,
and Envoy is killed outright: the engine restarts it into the pod's namespace and the pod answers
again without authz or the adapter being touched.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from a2a.types import a2a_pb2 as pb
from google.protobuf.json_format import MessageToDict

from stack import client as stack_client
from tests.docker.stacks import SEND, RunningStack, running_stack

# Setting a stack up (a build on a fresh engine included) takes longer than one unit test.
pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]

POD = ("pod", "envoy", "authz", "adapter")
STORES = ("redis", "postgres")


@pytest.fixture(scope="module")
def pod(
    docker_client: Any, stand_ins: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningStack]:
    """The default profile: the pod alone, in-memory stores."""
    with running_stack(docker_client, stand_ins, tmp_path_factory.mktemp("pod")) as running:
        yield running


@pytest.fixture(scope="module")
def replicated(
    docker_client: Any, stand_ins: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningStack]:
    """The `replicated` profile, set up as docs/operations.md says: PostgreSQL and Redis."""
    password = "test-only-" + os.urandom(8).hex()
    env = {
        "POSTGRES_PASSWORD": password,
        "DATABASE_URL": f"postgresql://orrery:{password}@postgres:5432/orrery",
        "ORRERY_A2A_REDIS_URL": "redis://redis:6379/0",
        "ORRERY_MULTI_REPLICA": "true",
    }
    work = tmp_path_factory.mktemp("replicated")
    with running_stack(
        docker_client, stand_ins, work, profiles=["replicated"], extra_env=env
    ) as running:
        yield running


def _action(task: pb.Task) -> dict[str, Any]:
    for part in task.status.message.parts:
        if part.WhichOneof("content") == "data":
            return dict(MessageToDict(part.data))
    raise AssertionError(f"no data part in {task}")


async def _approve_and_resume(running: RunningStack) -> pb.Task:
    """The whole approval flow; returns the completed task."""
    person = f"person-{os.urandom(4).hex()}"
    agent_token = running.token("delegated", subject=person)
    proposed = (await running.ask("restart checkout", agent_token)).task
    assert proposed.status.state == pb.TASK_STATE_INPUT_REQUIRED
    action = _action(proposed)
    assert action["approve_url"] == f"{running.url}/approvals/{action['action_id']}"
    with pytest.raises(stack_client.ClientFailure, match="404 not_found"):  # someone else's
        await stack_client.approve(running.url, running.token("human"), action["action_id"])
    human_token = running.token("human", subject=person)
    decided = await stack_client.approve(running.url, human_token, action["action_id"])
    assert decided.startswith(f"{action['action_id']}: approved")
    resumed = (
        await running.ask(
            "go ahead", agent_token, task_id=proposed.id, context_id=proposed.context_id
        )
    ).task
    assert resumed.status.state == pb.TASK_STATE_COMPLETED
    return resumed


def test_the_card_is_public(pod: RunningStack) -> None:
    """GET the agent card without a token: 200, the A2A interface at the public URL."""
    card = httpx.get(f"{pod.url}/.well-known/agent-card.json", timeout=10)
    assert card.status_code == 200
    assert card.json()["supportedInterfaces"][0]["url"] == f"{pod.url}/a2a"


def test_a2a_without_a_token_is_401(pod: RunningStack) -> None:
    """No bearer token: authz's 401 with the RFC 6750 challenge, through Envoy."""
    refused = httpx.post(f"{pod.url}/a2a", json=SEND, headers={"A2A-Version": "1.0"}, timeout=10)
    assert refused.status_code == 401
    assert refused.headers["www-authenticate"] == 'Bearer realm="orrery-a2a"'
    assert refused.json()["error"] == "missing_credential"


async def test_a2a_answers_a_token_with_the_sdk_client(pod: RunningStack) -> None:
    """`orrery-a2a ask`'s client (a2a-sdk) with a service token gets the agent's answer."""
    reply = await pod.ask("Which services are unhealthy?")
    assert reply.task.status.state == pb.TASK_STATE_COMPLETED
    assert stack_client.render(reply).answer


def test_anything_else_is_envoys_404(pod: RunningStack) -> None:
    """Only the contract's routes exist."""
    assert httpx.get(f"{pod.url}/nope", timeout=10).status_code == 404


async def test_the_delegating_human_approves_with_a_console_token(pod: RunningStack) -> None:
    """A guarded action waits; another person's console token is refused; the delegating
    person's approves; the agent's next message completes the task."""
    await _approve_and_resume(pod)


def test_containers_run_locked_down(pod: RunningStack) -> None:
    """Every container: non-root, no effective capability, a root filesystem it cannot write."""
    for name in (*POD, "envoy-config"):
        container = pod.container(name)
        config, host = container.attrs["Config"], container.attrs["HostConfig"]
        assert config["User"] not in ("", "0", "root") and not config["User"].startswith("0:")
        assert host["ReadonlyRootfs"] is True, name
        assert host["CapDrop"] == ["ALL"], name
        assert "no-new-privileges:true" in host["SecurityOpt"], name
    for name in POD:
        status = pod.container(name).exec_run(["cat", "/proc/1/status"]).output.decode()
        capabilities = dict(
            line.split(":\t") for line in status.splitlines() if line.startswith("Cap")
        )
        assert int(capabilities["CapEff"], 16) == 0, name
        assert int(capabilities["CapBnd"], 16) == 0, name
        write = pod.container(name).exec_run(["touch", "/written"])
        assert write.exit_code != 0 and b"Read-only file system" in write.output, name


def test_containers_run_as_compose_yaml_declares(pod: RunningStack) -> None:
    """What the engine runs matches each service's spec key by key (the interpreter's
    translation, checked on a real engine rather than on its own output)."""
    for name, service in pod.stack.project.services.items():
        attrs = pod.container(name).attrs
        config, host = attrs["Config"], attrs["HostConfig"]
        if service.command is not None:
            assert config["Cmd"] == list(service.command), name
        assert set(service.environment.items()) <= {
            tuple(entry.split("=", 1)) for entry in config["Env"]
        }, name
        assert bool(host.get("Init")) == service.init, name
        assert host["RestartPolicy"]["Name"] == service.restart, name
        assert sorted(host.get("Tmpfs") or {}) == sorted(service.tmpfs), name
        if service.pod is not None:
            assert host["NetworkMode"] == f"container:{pod.stack.containers[service.pod].id}"
        published = {
            key: [(binding["HostIp"], int(binding["HostPort"])) for binding in bindings]
            for key, bindings in (host.get("PortBindings") or {}).items()
        }
        assert published == {
            f"{port.container_port}/tcp": [(port.host_ip, port.host_port)] for port in service.ports
        }, name
        mounts = {mount["Destination"]: mount["RW"] for mount in attrs["Mounts"]}
        for mount in service.volumes:
            assert mounts[mount.target] is not mount.read_only, name
        if service.healthcheck is not None:
            assert config["Healthcheck"]["Test"] == list(service.healthcheck.test), name
        if service.health_disabled:
            assert config["Healthcheck"]["Test"] == ["NONE"], name


def test_secrets_reach_the_containers_only_from_the_environment(
    pod: RunningStack, docker_client: Any
) -> None:
    """The assertion keys are in the containers' environment, never in the image."""
    secret = pod.env["ORRERY_A2A_ASSERTION_KEYS"]
    image = docker_client.images.get(pod.stack.project.services["authz"].image)
    assert secret not in str(image.attrs["Config"])
    assert not any("ASSERTION_KEYS" in entry for entry in image.attrs["Config"]["Env"] or [])
    assert f"ORRERY_A2A_ASSERTION_KEYS={secret}" in pod.container("authz").attrs["Config"]["Env"]


def test_envoy_killed_outright_comes_back_and_the_pod_answers_again(pod: RunningStack) -> None:
    """SIGKILL Envoy's process from the host (a crash, the OOM killer): the engine restarts it
    in the holder's namespace, requests work again, and authz and the adapter were never
    restarted (the trap this layout avoids: they would keep a dead namespace)."""
    pod.wait_answering()
    untouched = {
        name: pod.container(name).attrs["State"]["StartedAt"] for name in ("authz", "adapter")
    }
    envoy = pod.container("envoy")
    restarts = envoy.attrs["RestartCount"]
    os.kill(envoy.attrs["State"]["Pid"], signal.SIGKILL)
    deadline = time.monotonic() + 60
    while pod.container("envoy").attrs["RestartCount"] == restarts:
        assert time.monotonic() < deadline, "the engine did not restart Envoy"
        time.sleep(0.2)
    pod.wait_answering()
    for name, started in untouched.items():
        state = pod.container(name).attrs["State"]
        assert (state["Status"], state["StartedAt"]) == ("running", started), name


@pytest.mark.parametrize("name", ["envoy", "authz", "adapter", "pod"])
def test_each_container_restarts_and_the_pod_answers_again(pod: RunningStack, name: str) -> None:
    """`docker compose restart NAME`: the pod answers again; restarting the holder restarts
    every member (their `restart: true`), which then share its new namespace."""
    restarted = pod.stack.restart(name)
    if name == "pod":
        assert set(restarted) == {"pod", "envoy", "authz", "adapter", "issuer"}
    else:
        assert restarted == [name]
    pod.wait_answering()


def test_replicated_profile_runs_the_stores_and_the_adapter_uses_them(
    replicated: RunningStack,
) -> None:
    """Redis and PostgreSQL start (healthy, no published port) and the adapter reports both."""
    for name in STORES:
        state = replicated.container(name).attrs
        assert state["State"]["Health"]["Status"] == "healthy", name
        assert not state["HostConfig"].get("PortBindings"), name
    events = [
        json.loads(line)
        for line in replicated.stack.logs("adapter", tail=500).splitlines()
        if line.startswith("{")
    ]
    serving = [event for event in events if event.get("event") == "serving"]
    assert serving, events
    assert (serving[-1]["stores"], serving[-1]["limiter"]) == ("postgresql", "redis")


def test_replicated_stores_run_locked_down(replicated: RunningStack) -> None:
    """The stores too: their image's non-root user, read-only, no capabilities."""
    for name in STORES:
        host = replicated.container(name).attrs["HostConfig"]
        assert host["ReadonlyRootfs"] is True and host["CapDrop"] == ["ALL"], name
        uid = replicated.container(name).exec_run(["id", "-u"]).output.decode().strip()
        assert uid != "0", name


async def test_replicated_tasks_outlive_an_adapter_restart(replicated: RunningStack) -> None:
    """The approval flow on the shared stores; after the adapter restarts, the task is still
    there (PostgreSQL, not the process's memory)."""
    token = replicated.token()
    done = (await replicated.ask("Which services are unhealthy?", token)).task
    await _approve_and_resume(replicated)
    replicated.stack.restart("adapter")
    replicated.wait_answering()
    fetched = httpx.post(
        f"{replicated.url}/a2a",
        json={"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": done.id}},
        headers={"A2A-Version": "1.0", **stack_client.bearer(token)},
        timeout=10,
    )
    assert fetched.json()["result"]["id"] == done.id


@pytest.mark.parametrize("name", STORES)
def test_each_store_restarts_and_the_pod_answers_again(replicated: RunningStack, name: str) -> None:
    """Restart Redis or PostgreSQL: once it is healthy again, so is the path through it."""
    assert replicated.stack.restart(name) == [name]
    replicated.stack.wait(name, "service_healthy")
    replicated.wait_answering()
