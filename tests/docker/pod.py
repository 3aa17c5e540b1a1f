"""Containers that share one network namespace, as a Kubernetes pod's do, for tests.

A holder container owns the namespace and publishes the pod's ports (Kubernetes' pause
container; compose.yaml's `pod` service does the same); every member joins it
(`network_mode=container:HOLDER`), so members reach each other on 127.0.0.1 and survive one
another's restarts. Probes come from outside the pod, through the published ports on the host's
loopback, as a kubelet's would from outside the containers.

    with running_pod(client, "orrery-test", image=IMAGE, ports={8080: free_port()}) as pod:
        pod.run("envoy", ENVOY_IMAGE, command=[...], user="101:101")
        httpx.get(pod.url(8080) + "/ready")
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from tests.docker import engine

# What every container of a test pod gets unless the caller says otherwise: compose.yaml's rules
# (and `nobody` where the caller names no user).
LOCKED_DOWN: Mapping[str, Any] = {
    "user": "65534:65534",
    "read_only": True,
    "cap_drop": ["ALL"],
    "security_opt": ["no-new-privileges:true"],
}


@dataclass
class Pod:
    client: Any
    name: str
    holder: Any
    ports: Mapping[int, int]  # container port → host port on 127.0.0.1
    members: dict[str, Any] = field(default_factory=dict)
    volumes: list[Any] = field(default_factory=list)  # the pod's own (emptyDirs): go with it

    def run(self, name: str, image: str, **options: Any) -> Any:
        """Start a member in the pod's namespace (compose.yaml's lock-down unless overridden)."""
        container = self.client.containers.run(
            image,
            name=f"{self.name}-{name}",
            network_mode=f"container:{self.holder.id}",
            labels=engine.owner_labels(),
            detach=True,
            **{**LOCKED_DOWN, **options},
        )
        self.members[name] = container
        return container

    def url(self, port: int) -> str:
        """Where the host reaches the pod's `port`."""
        return f"http://127.0.0.1:{self.ports[port]}"

    def remove(self) -> None:
        for item in [*self.members.values(), self.holder, *self.volumes]:
            engine.remove_quietly(item)
        self.members.clear()
        self.volumes.clear()


@contextmanager
def running_pod(
    client: Any,
    name: str,
    *,
    image: str,
    ports: Mapping[int, int],
    network: str | None = None,
    volumes: Mapping[str, str] | None = None,
) -> Iterator[Pod]:
    """A pod whose holder runs `sleep infinity` from `image` (any image with coreutils).

    `volumes` (name → Docker volume) are the pod's own, removed with it; the holder mounts each
    for the pod's life: Docker unmounts a tmpfs volume, and drops what it held, once no running
    container uses it, while a kubelet keeps an emptyDir until its pod goes (what an init
    container wrote there must outlive it)."""
    held = volumes or {}
    holder = client.containers.run(
        image,
        ["sleep", "infinity"],
        name=f"{name}-pod",
        init=True,
        ports={f"{inside}/tcp": ("127.0.0.1", outside) for inside, outside in ports.items()},
        network=network,
        labels=engine.owner_labels(),
        detach=True,
        volumes={volume: {"bind": f"/held/{key}", "mode": "rw"} for key, volume in held.items()},
        **LOCKED_DOWN,
    )
    pod = Pod(client, name, holder, dict(ports))
    pod.volumes.extend(client.volumes.get(volume) for volume in held.values())
    try:
        yield pod
    finally:
        pod.remove()
