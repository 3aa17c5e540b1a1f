"""deploy/kubernetes/base's pod, run as declared, probed as the kubelet probes it.

The base is rendered with `kubectl kustomize` under an overlay of the kind an operator writes
(its own IdP's issuer and JWKS URL, its public URL); the pod's containers run under Docker with the
manifest's own images, commands, environment, mounted ConfigMaps and Secrets, security context
and limits (`tests.docker.kubelet`), in one network namespace held by a do-nothing holder, and
start in the kubelet's order: the `envoy-config` init container run to a zero exit (it renders
Envoy's bootstrap into the pod's shared emptyDir), then each native sidecar (authz, Envoy) only
once the previous one's startup probe passed, the adapter (the main container) last. The last
test stops the pod the way the kubelet does: the adapter's preStop hook, then SIGTERM. Every
probe is an HTTP GET from outside the namespace to the pod's address.

The operator's part is played by the test: the Secrets (assertion keys, a TLS certificate it
generates) and the identity provider — the stack's dev issuer in the pod, serving its JWKS on
the pod's loopback (the one container the manifest does not declare).
"""

from __future__ import annotations

import json
import os
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from stack.keys import load_signing_key
from stack.tokens import Audiences, TokenKind, TokenRequest, claims_for, sign
from stack.up import generate_secrets
from tests.certs import make_certs
from tests.deploy.conftest import KUBERNETES, Manifests, environment, kustomize
from tests.docker import engine
from tests.docker.kubelet import (
    container_options,
    create_empty_dirs,
    runs_to_completion,
    wait_for_probe,
    write_volume,
)
from tests.docker.pod import Pod, running_pod

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]

ISSUER = "http://127.0.0.1:8090"
APP_REPOSITORY = "orrery-a2a-edge"
ENVOY_REPOSITORY = "envoyproxy/envoy"
CHECK_PORT, A2A_PORT = 9191, 8081  # on the pod's loopback only: published to prove it


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return make_certs(tmp_path_factory.mktemp("certs"))


def operator_overlay(directory: Path, public_url: str) -> Manifests:
    """What an operator applies: the base with their IdP and public URL (a configMap merge)."""
    directory.mkdir(parents=True)
    base = os.path.relpath(KUBERNETES / "base", directory)
    (directory / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [base],
                "configMapGenerator": [
                    {
                        "name": "orrery-a2a-config",
                        "behavior": "merge",
                        "literals": [
                            f"ORRERY_A2A_JWT_ISSUER={ISSUER}",
                            f"ORRERY_A2A_JWKS_URL={ISSUER}/.well-known/jwks.json",
                            f"ORRERY_A2A_PUBLIC_URL={public_url}/a2a",
                        ],
                    }
                ],
            }
        )
    )
    return Manifests("operator", kustomize(directory))


class RunningPod:
    """The pod of the rendered Deployment, member by member."""

    def __init__(
        self, pod: Pod, spec: dict[str, Any], ports: dict[int, int], issuer_key: Any
    ) -> None:
        self.pod = pod
        self.spec = spec
        self.ports = ports
        self.issuer_key = issuer_key  # the operator's IdP signs with it

    def container(self, name: str) -> dict[str, Any]:
        every = [*self.spec["initContainers"], *self.spec["containers"]]
        (found,) = [item for item in every if item["name"] == name]
        return dict(found)

    def url(self, port: int, scheme: str = "http") -> str:
        return f"{scheme}://127.0.0.1:{self.ports[port]}"


@pytest.fixture(scope="module")
def edge_pod(
    docker_client: Any,
    stand_ins: dict[str, str],
    app_image: Any,
    certificates: Any,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[RunningPod]:
    root = tmp_path_factory.mktemp("kubernetes-pod")
    port_numbers = [8443, 9192, 9193, 9902, CHECK_PORT, A2A_PORT]
    ports = {port: engine.free_port() for port in port_numbers}
    manifests = operator_overlay(root / "overlay", f"https://127.0.0.1:{ports[8443]}")
    spec = manifests.pod
    fs_group = spec["securityContext"]["fsGroup"]
    config_maps = {item["metadata"]["name"]: item["data"] for item in manifests.all("ConfigMap")}
    secrets = generate_secrets(root)
    secret_values = {"ORRERY_A2A_ASSERTION_KEYS": secrets.assertion_keys}
    volumes: dict[str, Path] = {}
    for volume in spec["volumes"]:
        if "configMap" in volume:
            source = volume["configMap"]
            (files,) = [data for name, data in config_maps.items() if name == source["name"]]
            volumes[volume["name"]] = write_volume(
                root / volume["name"], files, mode=source["defaultMode"]
            )
        elif "secret" in volume:
            assert volume["secret"]["secretName"] == "orrery-a2a-tls"
            tls = {
                "tls.crt": certificates.server_cert.read_text(),
                "tls.key": certificates.server_key.read_text(),
            }
            volumes[volume["name"]] = write_volume(
                root / volume["name"], tls, mode=volume["secret"]["defaultMode"], group=fs_group
            )
    images = {APP_REPOSITORY: app_image.tag, ENVOY_REPOSITORY: stand_ins["ORRERY_ENVOY_IMAGE"]}
    issuer_key = root / "issuer"
    issuer_key.mkdir()
    (issuer_key / "key.pem").write_bytes(secrets.issuer_key.read_bytes())
    os.chown(issuer_key / "key.pem", 10001, 10001)
    name = f"orrery-k8s-{os.urandom(4).hex()}"
    empty_dirs = create_empty_dirs(docker_client, spec, name)
    with running_pod(
        docker_client, name, image=app_image.tag, ports=ports, volumes=empty_dirs
    ) as pod:
        running = RunningPod(pod, spec, ports, load_signing_key(secrets.issuer_key))
        # The operator's identity provider (not part of the manifest): the dev issuer.
        pod.run(
            "idp",
            app_image.tag,
            user="10001:10001",
            command=[
                "python",
                "-m",
                "stack.issuer",
                "--key",
                "/keys/key.pem",
                "--addr",
                "127.0.0.1:8090",
            ],
            volumes={str(issuer_key): {"bind": "/keys", "mode": "ro"}},
        )
        # The kubelet's order: each native sidecar once the previous one's startup probe passed.
        for container in [*spec["initContainers"], *spec["containers"]]:
            env = environment(container, config_maps, secret_values)
            options = container_options(
                container, spec, images=images, env=env, volumes=volumes, empty_dirs=empty_dirs
            )
            started = pod.run(container["name"], options.pop("image"), **options)
            if runs_to_completion(container, spec):
                exited = started.wait(timeout=120)
                assert exited["StatusCode"] == 0, started.logs().decode(errors="replace")
            else:
                probe = container.get("startupProbe") or container["readinessProbe"]
                try:
                    wait_for_probe(probe, ports)
                except AssertionError as failed:
                    logged = started.logs(tail=40).decode(errors="replace")
                    raise AssertionError(
                        f"{failed}; {container['name']} logged:\n{logged}"
                    ) from None
        yield running


def token(pod: RunningPod, kind: TokenKind = "delegated") -> str:
    audiences = Audiences(a2a="orrery-a2a", console="orrery-console")
    claims = claims_for(
        TokenRequest(kind=kind),
        issuer=ISSUER,
        audiences=audiences,
        now=int(time.time()),
    )
    return sign(pod.issuer_key, claims)


def tls(certificates: Any) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(certificates.ca))


def send(pod: RunningPod, certificates: Any, bearer: str | None) -> httpx.Response:
    headers = {"A2A-Version": "1.0"}
    if bearer is not None:
        headers["Authorization"] = f"Bearer {bearer}"
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {
            "message": {"role": "ROLE_USER", "messageId": "m-1", "parts": [{"text": "hello"}]}
        },
    }
    return httpx.post(
        pod.url(8443, "https") + "/a2a",
        json=body,
        headers=headers,
        verify=tls(certificates),
        timeout=30,
    )


def test_every_container_is_ready_by_its_own_probes(edge_pod: RunningPod) -> None:
    """Started in order, each container passes its readiness and liveness probes, HTTP GETs on
    its diagnostics port from outside the pod's namespace."""
    for name in ("authz", "adapter", "envoy"):
        container = edge_pod.container(name)
        wait_for_probe(container["readinessProbe"], edge_pod.ports)
        wait_for_probe(container["livenessProbe"], edge_pod.ports)


def test_without_a_token_401_with_one_an_a2a_answer(
    edge_pod: RunningPod, certificates: Any
) -> None:
    """Through Envoy's TLS listener: no token is 401; a token from the operator's IdP gets an
    A2A answer; the card names the https URL."""
    refused = send(edge_pod, certificates, None)
    assert refused.status_code == 401
    assert refused.json()["error"] == "missing_credential"
    answered = send(edge_pod, certificates, token(edge_pod))
    assert answered.status_code == 200
    assert answered.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    card = httpx.get(
        edge_pod.url(8443, "https") + "/.well-known/agent-card.json", verify=tls(certificates)
    )
    assert card.json()["supportedInterfaces"][0]["url"] == edge_pod.url(8443, "https") + "/a2a"


def test_plain_http_and_the_loopback_sockets_are_not_reachable(edge_pod: RunningPod) -> None:
    """The TLS port answers no plain HTTP; authz's Check port and the adapter's A2A port, bound
    to the pod's loopback, answer nothing from outside even when published."""
    for port, scheme in ((8443, "http"), (CHECK_PORT, "http"), (A2A_PORT, "http")):
        with pytest.raises(httpx.HTTPError):
            httpx.get(edge_pod.url(port, scheme) + "/", timeout=3)


def test_authz_down_makes_the_pod_unready_until_it_is_back(
    edge_pod: RunningPod, certificates: Any
) -> None:
    """authz stops: its readiness probe fails (so the pod leaves the Service) while Envoy,
    still LIVE, answers 503; the kubelet restarts it, and the pod is ready and serving again."""
    authz = edge_pod.pod.members["authz"]
    authz.stop(timeout=10)
    try:
        wait_for_probe(edge_pod.container("authz")["readinessProbe"], edge_pod.ports, succeed=False)
        wait_for_probe(edge_pod.container("envoy")["readinessProbe"], edge_pod.ports)
        unavailable = send(edge_pod, certificates, token(edge_pod))
        assert (unavailable.status_code, unavailable.json()["error"]) == (503, "authz_unavailable")
    finally:
        authz.start()
    wait_for_probe(edge_pod.container("authz")["startupProbe"], edge_pod.ports)
    assert send(edge_pod, certificates, token(edge_pod)).status_code == 200


def test_metrics_are_scraped_from_each_diagnostics_port(edge_pod: RunningPod) -> None:
    """Prometheus reaches authz's, the adapter's and Envoy's /metrics on the pod's address."""
    expected = {
        9192: "orrery_authz_build_info",
        9193: "orrery_a2a_build_info",
        9902: "envoy_server_live",
    }
    for port, series in expected.items():
        body = httpx.get(edge_pod.url(port) + "/metrics", timeout=10).text
        assert series in body, port


def test_containers_run_with_the_declared_security_context(edge_pod: RunningPod) -> None:
    """What Docker enforces is what the manifest declares: non-root uid and gid with the pod's
    fsGroup, read-only root, no capabilities, no new privileges, the memory limit."""
    for name, user in (
        ("authz", "10001:10001"),
        ("adapter", "10001:10001"),
        ("envoy", "10101:10001"),
    ):
        member = edge_pod.pod.members[name]
        member.reload()
        host = member.attrs["HostConfig"]
        assert member.attrs["Config"]["User"] == user
        assert host["GroupAdd"] == ["10001"]
        assert host["ReadonlyRootfs"] is True
        assert host["CapDrop"] == ["ALL"]
        assert host["Privileged"] is False
        assert "no-new-privileges:true" in host["SecurityOpt"]
        declared = edge_pod.container(name)["resources"]["limits"]["memory"]
        assert host["Memory"] == int(declared.removesuffix("Mi")) * 1024**2


def test_no_container_runs_the_images_own_health_check(edge_pod: RunningPod) -> None:
    """As under a kubelet, which runs only the manifest's probes: the app image's HEALTHCHECK is
    off in every container the manifest declares, so Docker keeps no health state for them."""
    for container in [*edge_pod.spec["initContainers"], *edge_pod.spec["containers"]]:
        name = container["name"]
        member = edge_pod.pod.members[name]
        member.reload()
        assert member.attrs["Config"]["Healthcheck"]["Test"] == ["NONE"], name
        assert "Health" not in member.attrs["State"], name


def test_a_stopping_pod_ends_an_open_stream_through_envoy(
    edge_pod: RunningPod, certificates: Any
) -> None:
    """The kubelet's stop, as declared: the adapter's preStop hook has Envoy stop accepting (new
    connections are refused), then SIGTERM: an open SubscribeToTask gets the task's state as a
    final event, through the still running Envoy, and ends cleanly; the adapter exits 0. (Last
    in the module: the pod serves nothing new afterwards.)"""
    bearer = token(edge_pod)
    headers = {"A2A-Version": "1.0", "Authorization": f"Bearer {bearer}"}
    url = edge_pod.url(8443, "https") + "/a2a"
    message = {"role": "ROLE_USER", "messageId": "m-stop", "parts": [{"text": "restart checkout"}]}
    with httpx.Client(verify=tls(certificates), timeout=60) as client:
        proposed = client.post(
            url,
            headers=headers,
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "SendMessage",
                "params": {"message": message},
            },
        )
        task = proposed.json()["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        subscribe = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "SubscribeToTask",
            "params": {"id": task["id"]},
        }
        with client.stream("POST", url, headers=headers, json=subscribe) as stream:
            lines = stream.iter_lines()
            first = next(line for line in lines if line.startswith("data: "))
            adapter = edge_pod.pod.members["adapter"]
            hook = edge_pod.container("adapter")["lifecycle"]["preStop"]["exec"]["command"]
            ran = adapter.exec_run(hook)
            assert ran.exit_code == 0, ran.output
            with pytest.raises(httpx.ConnectError):
                httpx.get(url, verify=tls(certificates), timeout=3)
            adapter.kill(signal="SIGTERM")
            rest = [line for line in lines if line.startswith("data: ")]
    assert adapter.wait(timeout=60)["StatusCode"] == 0
    assert [json.loads(line.removeprefix("data: "))["id"] for line in (first, *rest)] == [2, 2]
    final = json.loads(rest[-1].removeprefix("data: "))["result"]["task"]
    assert (final["id"], final["status"]["state"]) == (task["id"], "TASK_STATE_INPUT_REQUIRED")
