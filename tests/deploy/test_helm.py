"""deploy/helm/orrery-a2a-edge: the chart lints, packages, refuses what cannot work, and covers
every Envoy setting as a value.

What its renderings contain is checked with the kustomize renderings, by the same tests
(test_kubernetes.py, test_checkov.py: the Helm profiles are entries of `RENDERINGS`).
"""

from __future__ import annotations

import re
import subprocess
import tarfile
from importlib.metadata import version
from pathlib import Path

import pytest
import yaml

from stack import edge_policy
from tests.deploy.conftest import (
    CHART,
    HELM_PROFILES,
    KUBERNETES,
    RENDERINGS,
    Manifests,
    Templated,
    helm,
    helm_template,
    helm_values,
)

# What the envoy-config init container reads besides stack.edge_policy's variables.
RENDERER_VARIABLES = {
    "ORRERY_A2A_AUTHZ_TRANSPORT",
    "ORRERY_A2A_TLS_RELOAD",
    "ORRERY_A2A_TLS_CLIENT_CA",
}


def _profile(name: str) -> str | None:
    how = RENDERINGS[name]
    assert isinstance(how, Templated)
    return how.values


@pytest.mark.parametrize("name", HELM_PROFILES)
def test_helm_lint_passes_for_every_profile(name: str) -> None:
    """`helm lint --strict` (the real binary): templates, the values schema, Chart.yaml."""
    result = subprocess.run(
        [helm(), "lint", "--strict", str(CHART), *helm_values(_profile(name))],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_chart_is_an_oci_publishable_release_of_this_version(tmp_path: Path) -> None:
    """Chart API v2, the project's version as the app version; `helm package` makes the archive
    `helm push … oci://` takes, without the CI profiles."""
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2"
    assert chart["appVersion"] == version("orrery-a2a-edge")
    assert re.fullmatch(r"\d+\.\d+\.\d+", chart["version"])
    assert (CHART / "values.schema.json").is_file()
    result = subprocess.run(
        [helm(), "package", str(CHART), "--destination", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    archive = tmp_path / f"{chart['name']}-{chart['version']}.tgz"
    with tarfile.open(archive) as packaged:
        names = packaged.getnames()
    assert f"{chart['name']}/values.schema.json" in names
    assert f"{chart['name']}/files/alerts.yaml" in names
    assert not any("/ci/" in name for name in names)


@pytest.mark.parametrize(
    ("settings", "reason"),
    [
        (["autoscaling.enabled=true"], "autoscaling.enabled needs replicated.enabled"),
        (["replicas=3"], "replicas > 1 needs replicated.enabled"),
        (["envoy.maxHeap=500MiB"], "more than 75% of Envoy's memory limit"),
        (["envoy.xffTrustedHops=1", "envoy.proxyProtocol=true"], "give one"),
        (["istio.enabled=true", "authz.transport=http"], "cannot restore the 503/508"),
        (["istio.enabled=true", "tls.clientCA.enabled=true"], "mTLS the mesh's"),
        (["envoy.xffTrustedHops=11"], "xffTrustedHops"),
        (["authz.transport=thrift"], "transport"),
        (["envoy.unknown=1"], "unknown"),
    ],
)
def test_the_chart_refuses_what_cannot_work(settings: list[str], reason: str) -> None:
    """Combinations that would apply but not work fail the render, saying why."""
    result = helm_template(None, *(arg for s in settings for arg in ("--set", s)))
    assert result.returncode != 0
    assert reason in result.stderr


def _documented_envoy_settings() -> set[str]:
    """The variables stack.edge_policy reads (its docstring documents each) and the renderer's
    own: every setting of the pod's Envoy."""
    source = Path(edge_policy.__file__).read_text()
    return set(re.findall(r'"(ORRERY_A2A_[A-Z_]+)"', source)) | RENDERER_VARIABLES


def _renderer_settings(manifests: Manifests) -> set[str]:
    (renderer,) = [c for c in manifests.pod["initContainers"] if c["name"] == "envoy-config"]
    names: set[str] = set()
    config_maps = manifests.config_maps()
    for source in renderer.get("envFrom", []):
        names |= set(config_maps[source["configMapRef"]["name"]])
    return names


def test_every_envoy_setting_is_a_value(renderings: dict[str, Manifests]) -> None:
    """Each documented Envoy setting is a key of the ConfigMap the renderer reads, in the
    kustomize base and in the chart: changing one is changing a value, never a committed file."""
    documented = _documented_envoy_settings()
    assert len(documented) >= 9
    for name in ("base", "helm"):
        assert _renderer_settings(renderings[name]) >= documented, name
    assert not list(KUBERNETES.rglob("envoy.yaml"))


def test_a_changed_setting_rolls_the_pods() -> None:
    """The chart's pod template carries a checksum of its ConfigMaps: a new value is a new pod
    template, so the pods restart and the init container renders again."""

    def checksum(*settings: str) -> str:
        result = helm_template(None, *(arg for s in settings for arg in ("--set", s)))
        assert result.returncode == 0, result.stderr
        (deployment,) = [
            d for d in yaml.safe_load_all(result.stdout) if d and d["kind"] == "Deployment"
        ]
        return str(deployment["spec"]["template"]["metadata"]["annotations"]["checksum/config"])

    assert checksum() != checksum("envoy.clientRateLimit=10/second")
    assert checksum() == checksum()
