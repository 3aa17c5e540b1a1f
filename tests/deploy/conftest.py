"""Plumbing for the deployment tests: render each kustomization and Helm profile once, find tools.

The tools (kubectl's kustomize, node with the CRD validators and helm, checkov, promtool) are
installed by `scripts/deploy-tools`. A missing tool skips its tests with the reason, except under
`ORRERY_TEST_REQUIRE_SERVICES=1` (CI), where it fails them: CI must not go green by skipping.

Every rendering the project supports is here, so a semantic test over `manifests` runs over all of
them: the kustomize overlays alone, each with the components an operator would add, and the Helm
chart with each of its CI value profiles (`helm template`, the real binary).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import services_required

REPO = Path(__file__).resolve().parents[2]
KUBERNETES = REPO / "deploy" / "kubernetes"
MONITORING = REPO / "deploy" / "monitoring"
CHART = REPO / "deploy" / "helm" / "orrery-a2a-edge"
NODE_PACKAGES = Path(__file__).resolve().parent
NAMESPACE = "orrery-a2a"  # where every rendering installs the edge
RELEASE = "orrery-a2a-edge"
MIN_KUBERNETES = "1.29.0"  # restartable init containers (native sidecars) on by default


@dataclass(frozen=True)
class Kustomized:
    """A kustomization (`resource`, relative to deploy/kubernetes) with components on top."""

    resource: str
    components: tuple[str, ...] = ()


@dataclass(frozen=True)
class Templated:
    """The chart, rendered with a values file from its ci/ folder (None: values.yaml alone)."""

    values: str | None = None


# What an operator writes. Our Envoy: the base; with mTLS + the HTTP transport + monitoring;
# replicated (with monitoring); Istio mode (with its monitoring). The chart: its defaults and
# each CI profile.
RENDERINGS: dict[str, Kustomized | Templated] = {
    "base": Kustomized("base"),
    "replicated": Kustomized("overlays/replicated"),
    "istio": Kustomized("overlays/istio"),
    "composed": Kustomized(
        "base", ("components/mtls", "components/http-authz", "components/monitoring")
    ),
    "replicated-monitored": Kustomized("overlays/replicated", ("components/monitoring",)),
    "istio-monitored": Kustomized("overlays/istio", ("components/monitoring-istio",)),
    "helm": Templated(),
    "helm-replicated": Templated("replicated-values.yaml"),
    "helm-istio": Templated("istio-values.yaml"),
    "helm-full": Templated("full-values.yaml"),
}
HELM_PROFILES = [name for name, how in RENDERINGS.items() if isinstance(how, Templated)]

Obj = dict[str, Any]


def require_tool(name: str, found: str | None, hint: str = "run scripts/deploy-tools") -> str:
    """`found` (a path), or skip — fail when services are required (CI)."""
    if found:
        return found
    message = f"{name} is not installed ({hint})"
    if services_required():
        pytest.fail(f"{message}; ORRERY_TEST_REQUIRE_SERVICES=1 makes deployment checks mandatory")
    pytest.skip(message)


def kubectl() -> str:
    return require_tool("kubectl", shutil.which("kubectl"), "kubectl kustomize renders manifests")


def helm() -> str:
    """helm 3 from the npm package scripts/deploy-tools installs (or ORRERY_TEST_HELM)."""
    local = NODE_PACKAGES / "node_modules" / ".bin" / "helm"
    return require_tool(
        "helm",
        os.environ.get("ORRERY_TEST_HELM") or (str(local) if local.exists() else None),
    )


def checkov() -> str:
    local = REPO / ".tools" / "checkov" / "bin" / "checkov"
    return require_tool(
        "checkov",
        os.environ.get("ORRERY_TEST_CHECKOV")
        or shutil.which("checkov")
        or (str(local) if local.exists() else None),
    )


def crd_validator() -> list[str]:
    node = require_tool("node", shutil.which("node"))
    require_tool(
        "the CRD validators (npm)",
        str(NODE_PACKAGES / "node_modules")
        if (NODE_PACKAGES / "node_modules" / "@kubernetes-models" / "istio").exists()
        else None,
    )
    return [node, str(NODE_PACKAGES / "validate-crds.mjs")]


def promtool() -> str:
    return require_tool("promtool", shutil.which("promtool"))


def _documents(text: str) -> list[Obj]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


def kustomize(directory: Path) -> list[Obj]:
    result = subprocess.run(
        [kubectl(), "kustomize", str(directory)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    return _documents(result.stdout)


def helm_values(profile: str | None) -> list[str]:
    return [] if profile is None else ["--values", str(CHART / "ci" / profile)]


def helm_template(profile: str | None, *more: str) -> subprocess.CompletedProcess[str]:
    """`helm template` of the chart as the release RELEASE in NAMESPACE on MIN_KUBERNETES."""
    return subprocess.run(
        [
            helm(),
            "template",
            RELEASE,
            str(CHART),
            "--namespace",
            NAMESPACE,
            "--kube-version",
            MIN_KUBERNETES,
            *helm_values(profile),
            *more,
        ],
        capture_output=True,
        text=True,
        check=False,
    )


@dataclass(frozen=True)
class Manifests:
    """One rendering: the objects `kubectl kustomize` or `helm template` printed."""

    name: str
    objects: list[Obj]

    def all(self, kind: str) -> list[Obj]:
        return [item for item in self.objects if item["kind"] == kind]

    def one(self, kind: str) -> Obj:
        (found,) = self.all(kind)
        return found

    @property
    def deployment(self) -> Obj:
        return self.one("Deployment")

    @property
    def pod(self) -> Obj:
        return dict(self.deployment["spec"]["template"]["spec"])

    @property
    def pod_labels(self) -> Mapping[str, str]:
        return dict(self.deployment["spec"]["template"]["metadata"]["labels"])

    @property
    def istio(self) -> bool:
        """Istio mode: the mesh proxy, not an Envoy of ours, is the pod's edge."""
        return bool(self.all("AuthorizationPolicy"))

    @property
    def replicated(self) -> bool:
        return any(
            item["name"] == "ORRERY_MULTI_REPLICA" for item in self.container("adapter")["env"]
        )

    def containers(self) -> Iterator[Obj]:
        yield from self.pod.get("initContainers", [])
        yield from self.pod["containers"]

    def container(self, name: str) -> Obj:
        (found,) = [item for item in self.containers() if item["name"] == name]
        return found

    def config_maps(self) -> dict[str, Mapping[str, str]]:
        return {item["metadata"]["name"]: item.get("data", {}) for item in self.all("ConfigMap")}


def env_of(container: Obj) -> Mapping[str, Obj]:
    return {item["name"]: item for item in container.get("env", [])}


def environment(
    container: Obj, config_maps: Mapping[str, Mapping[str, str]], secrets: Mapping[str, str]
) -> dict[str, str]:
    """The container's environment as the kubelet builds it: `envFrom` ConfigMaps first, then
    literal values, ConfigMap keys from the rendered ConfigMaps, Secret keys from `secrets` (key
    → value: what the operator created). Any other kind of source fails the test rather than
    being left out; so does a reference to a ConfigMap or key the rendering lacks."""
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        if set(source) != {"configMapRef"}:
            pytest.fail(f"an envFrom source the tests do not implement: {sorted(source)}")
        env.update(config_maps[source["configMapRef"]["name"]])
    for item in container.get("env", []):
        source = item.get("valueFrom")
        if source is None:
            env[item["name"]] = item["value"]
        elif set(source) == {"configMapKeyRef"}:
            ref = source["configMapKeyRef"]
            env[item["name"]] = config_maps[ref["name"]][ref["key"]]
        elif set(source) == {"secretKeyRef"}:
            env[item["name"]] = secrets[source["secretKeyRef"]["key"]]
        else:
            pytest.fail(f"an env source the tests do not implement: {sorted(source)}")
    return env


def _render(name: str, how: Kustomized | Templated, scratch: Path) -> list[Obj]:
    if isinstance(how, Templated):
        result = helm_template(how.values)
        assert result.returncode == 0, result.stderr
        return _documents(result.stdout)
    if not how.components:
        return kustomize(KUBERNETES / how.resource)
    # kustomize wants relative paths to other kustomizations, from a directory of its own.
    composed = scratch / name
    composed.mkdir()
    relative = Path(os.path.relpath(KUBERNETES, composed))
    (composed / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [str(relative / how.resource)],
                "components": [str(relative / component) for component in how.components],
            }
        )
    )
    return kustomize(composed)


@pytest.fixture(scope="session")
def renderings(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Manifests]:
    """Every entry of `RENDERINGS`, each rendered once."""
    scratch = tmp_path_factory.mktemp("kustomize")
    return {name: Manifests(name, _render(name, how, scratch)) for name, how in RENDERINGS.items()}


@pytest.fixture(params=list(RENDERINGS))
def manifests(request: pytest.FixtureRequest, renderings: dict[str, Manifests]) -> Manifests:
    """Each rendering in turn."""
    return renderings[request.param]
