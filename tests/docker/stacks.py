"""compose.yaml running on the engine, as `docker compose up --build` would run it, for tests.

`running_stack()` loads the file with the environment a user would put in `.env` (the identity
provider, assertion keys, the published port and public URL, the stand-in images), builds the app
image, starts the pod and its members, and waits until authz and the adapter are healthy. A user
has an identity provider; the test has the dev issuer (`python -m stack.issuer`, from the same
image) as one more member of the pod, so authz fetches its JWKS over the pod's loopback and the
test mints tokens with the matching key.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from a2a.types import a2a_pb2 as pb
from cryptography.hazmat.primitives.asymmetric import ec

from stack import client as stack_client
from stack.keys import new_assertion_keys, new_signing_key, private_pem
from stack.tokens import Audiences, TokenKind, TokenRequest, mint
from tests.docker import compose, engine

COMPOSE_FILE = engine.REPO / "compose.yaml"
ISSUER = "http://127.0.0.1:8090"
SEND = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "SendMessage",
    "params": {"message": {"role": "ROLE_USER", "messageId": "m1", "parts": [{"text": "hi"}]}},
}


@dataclass
class RunningStack:
    stack: compose.Stack
    url: str
    key: ec.EllipticCurvePrivateKey
    env: Mapping[str, str]
    verify: ssl.SSLContext | bool = True  # the CA of a TLS listener's certificate

    def token(self, kind: TokenKind = "service", **request: Any) -> str:
        return mint(
            self.key,
            TokenRequest(kind=kind, **request),
            issuer=ISSUER,
            audiences=Audiences(a2a="orrery-a2a", console="orrery-console"),
            now=int(time.time()),
        )

    def container(self, name: str) -> Any:
        container = self.stack.containers[name]
        container.reload()
        return container

    async def ask(
        self,
        text: str,
        token: str | None = None,
        *,
        task_id: str | None = None,
        context_id: str | None = None,
    ) -> pb.StreamResponse:
        """One blocking SendMessage with the stack's own a2a-sdk client (`orrery-a2a ask`)."""
        return await stack_client.ask(
            self.url, token or self.token(), text, task_id=task_id, context_id=context_id
        )

    def answers(self) -> bool:
        """The card is served and an authorised SendMessage gets a JSON-RPC result."""
        try:
            card = httpx.get(
                f"{self.url}/.well-known/agent-card.json", timeout=5, verify=self.verify
            )
            sent = httpx.post(
                f"{self.url}/a2a",
                json=SEND,
                headers={"A2A-Version": "1.0", **stack_client.bearer(self.token())},
                timeout=10,
                verify=self.verify,
            )
        except httpx.HTTPError:
            return False
        return card.status_code == 200 and sent.status_code == 200 and "result" in sent.json()

    def wait_answering(self, timeout: float = 90.0) -> float:
        """Seconds until the stack answers again; fails with every member's log after `timeout`."""
        start = time.monotonic()
        while time.monotonic() - start < timeout:
            if self.answers():
                return time.monotonic() - start
            time.sleep(0.5)
        logs = "\n".join(f"--- {name}\n{self.stack.logs(name)}" for name in self.stack.containers)
        raise AssertionError(f"the stack did not answer within {timeout:.0f} s\n{logs}")


def issuer_service(image: str, key_dir: Path) -> dict[str, Any]:
    """The dev issuer as one more member of the pod, locked down like the rest."""
    return {
        "image": image,
        "command": ["python", "-m", "stack.issuer", "--key", "/run/issuer/issuer-key.pem"],
        "user": "10001:10001",
        "read_only": True,
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges:true"],
        "network_mode": "service:pod",
        "volumes": [f"{key_dir}:/run/issuer:ro"],
        "depends_on": {"pod": {"condition": "service_started", "restart": True}},
        "healthcheck": {
            "test": ["CMD", "python", "-m", "stack.probe", "http", f"{ISSUER}/healthz"],
            "interval": "1s",
            "timeout": "5s",
            "retries": 30,
        },
    }


@contextmanager
def running_stack(
    client: Any,
    stand_ins: Mapping[str, str],
    work_dir: Path,
    *,
    profiles: Iterable[str] = (),
    extra_env: Mapping[str, str] | None = None,
    tls: ssl.SSLContext | None = None,
) -> Iterator[RunningStack]:
    """The stack with `extra_env` over a user's `.env`; `tls`: its listener speaks TLS (the
    caller sets the TLS variables), and this context verifies it."""
    key = new_signing_key()
    key_dir = work_dir / "issuer"
    key_dir.mkdir()
    (key_dir / "issuer-key.pem").write_bytes(private_pem(key))
    (key_dir / "issuer-key.pem").chmod(0o644)  # read by uid 10001 in the container; a test key
    key_dir.chmod(0o755)
    port = engine.free_port()
    url = f"{'https' if tls else 'http'}://127.0.0.1:{port}"
    env = {
        **stand_ins,
        "ORRERY_A2A_IMAGE_TAG": f"compose-{engine.context_digest()}",
        "ORRERY_A2A_JWT_ISSUER": ISSUER,
        "ORRERY_A2A_JWKS_URL": f"{ISSUER}/.well-known/jwks.json",
        "ORRERY_A2A_JWT_ALGORITHMS": "ES256",
        "ORRERY_CONSOLE_CLIENTS": "dev-console",  # the dev issuer's console client
        "ORRERY_A2A_ASSERTION_KEYS": new_assertion_keys(),
        "ORRERY_A2A_PUBLISH": f"127.0.0.1:{port}",
        "ORRERY_A2A_PUBLIC_URL": f"{url}/a2a",
        **(extra_env or {}),
    }
    project = compose.load(COMPOSE_FILE, env, project=f"orrery-test-{port}", profiles=profiles)
    app_image = project.services["authz"].image
    project = project.with_service("issuer", issuer_service(app_image, key_dir))
    stack = compose.Stack(client, project, build_network=engine.BUILD_NETWORK)
    try:
        stack.build()
        stack.up(["pod", "issuer"])
        stack.wait("issuer", "service_healthy")
        stack.up()
        for name in ("authz", "adapter"):
            stack.wait(name, "service_healthy")
        running = RunningStack(stack, url, key, env, tls or True)
        running.wait_answering()
        yield running
    finally:
        stack.down()
