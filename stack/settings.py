"""Settings of the local stack: where each process listens, where state and config live.

Every address defaults to its port in docs/contract.md#ports and can be overridden by a flag of
`orrery-a2a up` or the environment variable it stands for (the flag wins), so tests and a second
stack can run on other ports. Port 0 asks the OS for a free port: the components report what they
bound. Envoy's admin API has no address to choose: it is the Unix socket `envoy-admin.sock` in the
state directory (0600 in a 0700 directory), so only the user who ran `up` can quit, drain or
reconfigure the edge; on a loopback port any local user could. With `ORRERY_A2A_REPLICAS` > 1
(`--replicas`), that many authz and adapter processes run behind the one Envoy, each on a free port
of its configured host (what a pod with replicas looks like to Envoy).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from runtime.addresses import Address
from runtime.env import EnvReader
from runtime.errors import ConfigError
from stack.addresses import NotLoopback, require_loopback, socket_path_problem
from stack.edge_policy import EdgePolicy
from stack.envoy_config import (
    ADMIN_SOCKET,
    AuthzTransport,
    TlsFiles,
    parse_authz_transport,
    repo_config_path,
)
from stack.state import ENVOY_ADMIN_SOCKET, default_state_dir

# variable → (flag of `orrery-a2a up`, default)
# The admin API's TCP address before it moved to the state directory's socket: refused if set.
RETIRED_ADMIN_VARIABLE = "ORRERY_A2A_ENVOY_ADMIN_ADDR"
ADDRESSES: Mapping[str, tuple[str, str]] = {
    "ORRERY_A2A_LISTEN_ADDR": ("--listen", "127.0.0.1:8080"),
    "ORRERY_A2A_AUTHZ_ADDR": ("--authz", "127.0.0.1:9191"),
    "ORRERY_A2A_AUTHZ_DIAG_ADDR": ("--authz-diag", "127.0.0.1:9192"),
    "ORRERY_A2A_AUTHZ_HTTP_ADDR": ("--authz-http", "127.0.0.1:9194"),
    "ORRERY_A2A_ADAPTER_ADDR": ("--adapter", "127.0.0.1:8081"),
    "ORRERY_A2A_ISSUER_ADDR": ("--issuer", "127.0.0.1:8090"),
}


@dataclass(frozen=True, slots=True)
class StackSettings:
    listen: Address
    admin: Path  # Envoy's admin socket, in `state_dir`
    authz: Address
    authz_diag: Address
    adapter: Address
    issuer: Address
    state_dir: Path
    envoy_config: Path
    ready_timeout: float
    replicas: int = 1
    # The URL clients reach /a2a at, when it is not Envoy's own (a proxy, a port forward): the
    # adapter advertises it in the card and checks it (docs/contract.md#adapter-variables).
    public_url: str | None = None
    # The user's own card-signing keys; without them `up` signs with a per-run key.
    card_signing_keys: str | None = None
    edge: EdgePolicy = field(default_factory=EdgePolicy)
    tls: TlsFiles | None = None
    # How Envoy asks authz (ORRERY_A2A_AUTHZ_TRANSPORT): gRPC, or HTTP on `authz_http`.
    authz_transport: AuthzTransport = "grpc"
    authz_http: Address = ("127.0.0.1", 9194)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> StackSettings:
        """Build from the environment (flags already folded in); one error names every problem."""
        settings, problems = cls.read(env)
        if problems:
            raise ConfigError(problems)
        return settings

    @classmethod
    def read(cls, env: Mapping[str, str]) -> tuple[StackSettings, list[str]]:
        """The settings, with a fallback for every bad variable, and the problems: `check` goes
        on to check the components with what it could read."""
        reader = EnvReader(env)
        address = {name: reader.address(name, default) for name, (_, default) in ADDRESSES.items()}
        try:
            require_loopback(address["ORRERY_A2A_ISSUER_ADDR"][0], "the dev issuer")
        except NotLoopback as exc:
            reader.problem("ORRERY_A2A_ISSUER_ADDR", str(exc))
        state_dir = default_state_dir(env)
        admin = state_dir / ENVOY_ADMIN_SOCKET
        if problem := socket_path_problem(admin, ADMIN_SOCKET):
            reader.problem(
                "ORRERY_A2A_STATE_DIR (--state-dir)",
                f"{problem}: choose a shorter state directory",
            )
        if reader.raw(RETIRED_ADMIN_VARIABLE):
            reader.problem(
                RETIRED_ADMIN_VARIABLE,
                f"the local stack serves Envoy's admin API only on the Unix socket {admin};"
                " unset this variable",
            )
        config = Path(reader.string("ORRERY_A2A_ENVOY_CONFIG", str(repo_config_path())))
        if not config.is_file():
            reader.problem("ORRERY_A2A_ENVOY_CONFIG", f"no such file: {config}")
        settings = cls(
            listen=address["ORRERY_A2A_LISTEN_ADDR"],
            admin=admin,
            authz=address["ORRERY_A2A_AUTHZ_ADDR"],
            authz_diag=address["ORRERY_A2A_AUTHZ_DIAG_ADDR"],
            adapter=address["ORRERY_A2A_ADAPTER_ADDR"],
            issuer=address["ORRERY_A2A_ISSUER_ADDR"],
            state_dir=state_dir,
            envoy_config=config,
            ready_timeout=reader.seconds("ORRERY_A2A_READY_TIMEOUT", "60s", minimum=1.0),
            replicas=reader.integer("ORRERY_A2A_REPLICAS", 1, minimum=1, maximum=8),
            public_url=reader.raw("ORRERY_A2A_PUBLIC_URL") or None,
            card_signing_keys=reader.raw("ORRERY_A2A_CARD_SIGNING_KEYS") or None,
            edge=EdgePolicy.read(reader),
            tls=_tls(reader),
            authz_transport=reader.parsed(
                "ORRERY_A2A_AUTHZ_TRANSPORT", "grpc", parse_authz_transport, "grpc"
            ),
            authz_http=address["ORRERY_A2A_AUTHZ_HTTP_ADDR"],
        )
        return settings, reader.problems


TLS_FILES = ("ORRERY_A2A_TLS_CERT", "ORRERY_A2A_TLS_KEY", "ORRERY_A2A_TLS_CLIENT_CA")


def _tls(reader: EnvReader) -> TlsFiles | None:
    """The listener's PEM files: certificate and key together, a client CA only on top."""
    paths = {name: reader.string(name, "") for name in TLS_FILES}
    for name, path in paths.items():
        if path and not Path(path).is_file():
            reader.problem(name, f"no such file: {path}")
    cert, key, client_ca = (paths[name] for name in TLS_FILES)
    if bool(cert) != bool(key):
        reader.problem("ORRERY_A2A_TLS_CERT", "set both ORRERY_A2A_TLS_CERT and _KEY, or neither")
        return None
    if client_ca and not cert:
        reader.problem("ORRERY_A2A_TLS_CLIENT_CA", "mTLS needs ORRERY_A2A_TLS_CERT and _KEY")
    if not cert:
        return None
    return TlsFiles(Path(cert), Path(key), Path(client_ca) if client_ca else None)
