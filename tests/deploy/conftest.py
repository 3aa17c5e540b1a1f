"""Plumbing for the deployment tests: render each kustomization once, find the checking tools.

The tools (kubectl's kustomize, node with the CRD validators, checkov, promtool) are installed by
`scripts/deploy-tools`. A missing tool skips its tests with the reason, except under
`ORRERY_TEST_REQUIRE_SERVICES=1` (CI), where it fails them: CI must not go green by skipping.
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
NODE_PACKAGES = Path(__file__).resolve().parent
KUSTOMIZATIONS = {
    "base": KUBERNETES / "base",
    "replicated": KUBERNETES / "overlays" / "replicated",
    "istio": KUBERNETES / "overlays" / "istio",
}
# What an operator writes: the base plus both optional components (mTLS, PodMonitor); and the
# base with Envoy asking authz over HTTP (a component that, like mTLS, replaces Envoy's config).
COMPONENTS = ("components/mtls", "components/monitoring")
COMPOSITIONS = {"composed": COMPONENTS, "http-authz": ("components/http-authz",)}

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


def kustomize(directory: Path) -> list[Obj]:
    result = subprocess.run(
        [kubectl(), "kustomize", str(directory)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


@dataclass(frozen=True)
class Manifests:
    """One rendering: the objects `kubectl kustomize` printed."""

    name: str
    objects: list[Obj]

    def all(self, kind: str) -> list[Obj]:
        return [item for item in self.objects if item["kind"] == kind]

    def one(self, kind: str) -> Obj:
        (found,) = self.all(kind)
        return found

    @property
    def pod(self) -> Obj:
        return dict(self.one("Deployment")["spec"]["template"]["spec"])

    def containers(self) -> Iterator[Obj]:
        yield from self.pod.get("initContainers", [])
        yield from self.pod["containers"]

    def container(self, name: str) -> Obj:
        (found,) = [item for item in self.containers() if item["name"] == name]
        return found


def env_of(container: Obj) -> Mapping[str, Obj]:
    return {item["name"]: item for item in container.get("env", [])}


def environment(
    container: Obj, config_maps: Mapping[str, Mapping[str, str]], secrets: Mapping[str, str]
) -> dict[str, str]:
    """The container's environment as the kubelet builds it: literal values, ConfigMap keys from
    the rendered ConfigMaps, Secret keys from `secrets` (key → value: what the operator
    created). Any other kind of source fails the test rather than being left out."""
    env: dict[str, str] = {}
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


@pytest.fixture(scope="session")
def renderings(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Manifests]:
    """base, replicated, istio, and the `COMPOSITIONS` (base + components), each rendered once."""
    rendered = {name: Manifests(name, kustomize(path)) for name, path in KUSTOMIZATIONS.items()}
    for name, components in COMPOSITIONS.items():
        # kustomize wants relative paths to other kustomizations, from a directory of its own.
        composed = tmp_path_factory.mktemp(name)
        relative = Path(os.path.relpath(KUBERNETES, composed))
        (composed / "kustomization.yaml").write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "kustomize.config.k8s.io/v1beta1",
                    "kind": "Kustomization",
                    "resources": [str(relative / "base")],
                    "components": [str(relative / component) for component in components],
                }
            )
        )
        rendered[name] = Manifests(name, kustomize(composed))
    return rendered


@pytest.fixture(params=[*KUSTOMIZATIONS, *COMPOSITIONS])
def manifests(request: pytest.FixtureRequest, renderings: dict[str, Manifests]) -> Manifests:
    """Each rendering in turn."""
    return renderings[request.param]
