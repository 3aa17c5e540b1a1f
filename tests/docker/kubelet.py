"""Just enough of a kubelet to run the Kubernetes base's pod under Docker, as declared.

`container_options` turns one container of a rendered pod spec into Docker options: the
manifest's own command, the environment the kubelet would build (`tests.deploy.conftest.
environment`: `envFrom` ConfigMaps, literal values, ConfigMap keys, Secret keys), mounts
(ConfigMap and Secret volumes as read-only bind mounts of files written like the kubelet writes
them; each `emptyDir` with `medium: Memory` one tmpfs volume of the pod's, `empty_dirs`, shared
by every container that mounts it, read-only where the mount says so), security context
(uid, gid, `fsGroup` as a supplementary group, read-only root, capabilities, no new privileges)
and resource limits. A field it does not
implement fails the test instead of being ignored, so the pod that runs is the pod declared.

`wait_for_probe` probes the way the kubelet does: an HTTP GET from outside the pod's network
namespace to the pod's address and the probe's port (here: the holder's published port), until
a 2xx/3xx or `failureThreshold` times `periodSeconds` runs out.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.docker import engine

Obj = dict[str, Any]

CONTAINER_FIELDS = {
    "name",
    "image",
    "imagePullPolicy",
    "restartPolicy",
    "command",
    "envFrom",
    "env",
    "ports",
    "startupProbe",
    "readinessProbe",
    "livenessProbe",
    "resources",
    "securityContext",
    "volumeMounts",
    # Only run when a pod stops; this kubelet starts pods and removes them. The order a stop
    # follows is checked on the manifests (tests/deploy) and by `stack.envoy_admin`'s own test.
    "lifecycle",
}
SECURITY_FIELDS = {
    "runAsNonRoot",
    "runAsUser",
    "runAsGroup",
    "allowPrivilegeEscalation",
    "privileged",
    "readOnlyRootFilesystem",
    "capabilities",
    "seccompProfile",
}
POD_SECURITY_FIELDS = {"runAsNonRoot", "runAsUser", "runAsGroup", "fsGroup", "seccompProfile"}
PROBE_FIELDS = {"httpGet", "periodSeconds", "failureThreshold"}
MEMORY_UNITS = {"Mi": 1024**2, "Gi": 1024**3}


def refuse(what: str) -> None:
    pytest.fail(f"the test kubelet does not implement {what}")


def only(fields: Mapping[str, Any], known: set[str], where: str) -> None:
    unknown = set(fields) - known
    if unknown:
        refuse(f"{where}: {sorted(unknown)}")


def _bytes(quantity: str) -> int:
    for suffix, factor in MEMORY_UNITS.items():
        if quantity.endswith(suffix):
            return int(quantity.removesuffix(suffix)) * factor
    refuse(f"memory quantity {quantity!r}")
    return 0


def _nano_cpus(quantity: str) -> int:
    if quantity.endswith("m"):
        return int(quantity.removesuffix("m")) * 1_000_000
    return int(float(quantity) * 1_000_000_000)


def container_options(
    container: Obj,
    pod: Obj,
    *,
    images: Mapping[str, str],
    env: Mapping[str, str],
    volumes: Mapping[str, Path],
    empty_dirs: Mapping[str, str],
) -> dict[str, Any]:
    """Docker options for `container` of `pod` (`volumes`: name → host directory holding the
    ConfigMap's or Secret's files; `empty_dirs`: name → the pod's Docker volume for that
    emptyDir, from `create_empty_dirs`; `images`: the manifest's repository → the local image)."""
    only(container, CONTAINER_FIELDS, f"container {container['name']}")
    security = container["securityContext"]
    only(security, SECURITY_FIELDS, "securityContext")
    pod_security = pod["securityContext"]
    only(pod_security, POD_SECURITY_FIELDS, "the pod's securityContext")
    if security.get("seccompProfile", {"type": "RuntimeDefault"}) != {"type": "RuntimeDefault"}:
        refuse("a seccomp profile other than RuntimeDefault (Docker's default)")
    uid = security.get("runAsUser", pod_security["runAsUser"])
    gid = security.get("runAsGroup", pod_security["runAsGroup"])
    assert uid != 0 and security["runAsNonRoot"]
    mounts: dict[str, Obj] = {}
    declared = {volume["name"]: volume for volume in pod["volumes"]}
    for mount in container.get("volumeMounts", []):
        volume = declared[mount["name"]]
        if "emptyDir" in volume:
            mode = "ro" if mount.get("readOnly") else "rw"
            mounts[empty_dirs[mount["name"]]] = {"bind": mount["mountPath"], "mode": mode}
        elif "configMap" in volume or "secret" in volume:
            assert mount.get("readOnly") is True
            mounts[str(volumes[mount["name"]])] = {"bind": mount["mountPath"], "mode": "ro"}
        else:
            refuse(f"volume {sorted(volume)}")
    repository = container["image"].rsplit(":", 1)[0]
    limits = container["resources"]["limits"]
    return {
        "image": images[repository],
        "entrypoint": container["command"],
        "command": [],
        "environment": dict(env),
        "user": f"{uid}:{gid}",
        "group_add": [str(pod_security["fsGroup"])],
        "read_only": security["readOnlyRootFilesystem"],
        "privileged": security["privileged"],
        "cap_drop": security["capabilities"]["drop"],
        "security_opt": [] if security["allowPrivilegeEscalation"] else ["no-new-privileges:true"],
        "volumes": mounts,
        "mem_limit": _bytes(limits["memory"]),
        "nano_cpus": _nano_cpus(limits["cpu"]),
        # The kubelet runs no image HEALTHCHECK (its own probes stand in: `wait_for_probe`);
        # Docker would run the app image's every few seconds in each container.
        "healthcheck": {"test": ["NONE"]},
    }


def create_empty_dirs(client: Any, pod: Obj, prefix: str) -> dict[str, str]:
    """Each emptyDir of `pod` as one Docker volume on tmpfs of its `sizeLimit` (name → volume
    name), made once for the pod: the kubelet shares an emptyDir among the pod's containers, so
    what the init container renders there is what Envoy reads. Only `medium: Memory` is
    implemented (every emptyDir the manifests declare)."""
    made: dict[str, str] = {}
    for volume in pod["volumes"]:
        if "emptyDir" not in volume:
            continue
        only(volume["emptyDir"], {"medium", "sizeLimit"}, "emptyDir")
        if volume["emptyDir"].get("medium") != "Memory":
            refuse("an emptyDir on disk (only medium: Memory)")
        size = _bytes(volume["emptyDir"]["sizeLimit"])
        created = client.volumes.create(
            f"{prefix}-{volume['name']}",
            driver="local",
            driver_opts={"type": "tmpfs", "device": "tmpfs", "o": f"size={size},mode=1777"},
            labels=engine.owner_labels(),
        )
        made[volume["name"]] = created.name
    return made


def runs_to_completion(container: Obj, pod: Obj) -> bool:
    """A plain init container (no `restartPolicy: Always`): the kubelet runs it to a zero exit
    before starting the next container, and never probes it."""
    is_init = any(item["name"] == container["name"] for item in pod.get("initContainers", []))
    return is_init and container.get("restartPolicy") != "Always"


def write_volume(
    directory: Path, files: Mapping[str, str], *, mode: int, group: int | None = None
) -> Path:
    """A ConfigMap's or Secret's files as the kubelet writes them: `mode`, and the `fsGroup`
    as their group when the pod has one."""
    directory.mkdir(parents=True)
    for name, content in files.items():
        path = directory / name
        path.write_text(content)
        path.chmod(mode)
        if group is not None:
            os.chown(path, 0, group)
    directory.chmod(0o755)
    return directory


def http_get(url: str) -> int | None:
    """The status of one GET, or None when nothing answers (refused, reset, timed out)."""
    try:
        return httpx.get(url, timeout=1.0).status_code
    except httpx.HTTPError:
        return None


def wait_for_probe(probe: Obj, ports: Mapping[int, int], *, succeed: bool = True) -> None:
    """Probe until it succeeds (or, with `succeed=False`, fails) within its thresholds."""
    only(probe, PROBE_FIELDS, "probe")
    get = probe["httpGet"]
    url = f"http://127.0.0.1:{ports[get['port']]}{get['path']}"
    deadline = time.monotonic() + probe["periodSeconds"] * probe["failureThreshold"]
    while True:
        status = http_get(url)
        passed = status is not None and 200 <= status < 400
        if passed is succeed:
            return
        assert time.monotonic() < deadline, f"probe {url} never {'passed' if succeed else 'failed'}"
        time.sleep(0.5)
