"""What `up` sets for authz and the adapter, and the stack's settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.errors import ConfigError
from stack.envoy_config import TlsFiles
from stack.settings import StackSettings
from stack.state import ENVOY_ADMIN_SOCKET
from stack.wiring import Wiring, adapter_env, authz_env, child_env

WIRING = Wiring(
    issuer="http://127.0.0.1:8090",
    assertion_keys="dev-1=" + "A" * 43,
    public_url="http://127.0.0.1:8080/a2a",
)


def test_defaults_are_designs_ports() -> None:
    """Envoy 8080, authz 9191/9192, adapter 8081, issuer 8090, all loopback; Envoy's admin API
    on a Unix socket in the state directory."""
    settings = StackSettings.from_env({})
    assert settings.listen == ("127.0.0.1", 8080)
    assert settings.admin == settings.state_dir / ENVOY_ADMIN_SOCKET
    assert (settings.authz, settings.authz_diag) == (("127.0.0.1", 9191), ("127.0.0.1", 9192))
    assert (settings.adapter, settings.issuer) == (("127.0.0.1", 8081), ("127.0.0.1", 8090))
    assert settings.envoy_config.name == "envoy.yaml"


def test_every_address_can_be_overridden() -> None:
    """Each address variable moves its component (port 0 allowed)."""
    settings = StackSettings.from_env(
        {"ORRERY_A2A_LISTEN_ADDR": "127.0.0.1:0", "ORRERY_A2A_ADAPTER_ADDR": "[::1]:18081"}
    )
    assert settings.listen == ("127.0.0.1", 0)
    assert settings.adapter == ("::1", 18081)


def test_every_bad_setting_is_named_at_once() -> None:
    """A bad address, a network-facing issuer and a missing config file: one error, three names."""
    with pytest.raises(ConfigError) as failed:
        StackSettings.from_env(
            {
                "ORRERY_A2A_AUTHZ_ADDR": "9191",
                "ORRERY_A2A_ISSUER_ADDR": "0.0.0.0:8090",
                "ORRERY_A2A_ENVOY_CONFIG": "/nonexistent/envoy.yaml",
            }
        )
    names = [problem.split(":")[0] for problem in failed.value.problems]
    assert names == ["ORRERY_A2A_AUTHZ_ADDR", "ORRERY_A2A_ISSUER_ADDR", "ORRERY_A2A_ENVOY_CONFIG"]


def test_tls_files_come_as_a_pair_and_must_exist(tmp_path: Path) -> None:
    """Certificate and key together (a client CA only on top); each file must exist."""
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.write_text("pem"), key.write_text("pem")
    settings = StackSettings.from_env(
        {"ORRERY_A2A_TLS_CERT": str(cert), "ORRERY_A2A_TLS_KEY": str(key)}
    )
    assert settings.tls == TlsFiles(cert, key)
    assert StackSettings.from_env({}).tls is None
    for env, name in (
        ({"ORRERY_A2A_TLS_CERT": str(cert)}, "ORRERY_A2A_TLS_CERT"),
        ({"ORRERY_A2A_TLS_CLIENT_CA": str(cert)}, "ORRERY_A2A_TLS_CLIENT_CA"),
        (
            {"ORRERY_A2A_TLS_CERT": str(cert), "ORRERY_A2A_TLS_KEY": str(tmp_path / "none")},
            "ORRERY_A2A_TLS_KEY",
        ),
    ):
        with pytest.raises(ConfigError) as failed:
            StackSettings.from_env(env)
        assert [problem.split(":")[0] for problem in failed.value.problems] == [name]


def test_authz_is_wired_to_the_dev_issuer_and_this_runs_keys() -> None:
    """authz gets its addresses, the issuer, JWKS URL, both audiences, the dev console client,
    ES256 and the keys."""
    assert authz_env(StackSettings.from_env({}), WIRING) == {
        "ORRERY_A2A_AUTHZ_ADDR": "127.0.0.1:9191",
        "ORRERY_A2A_AUTHZ_DIAG_ADDR": "127.0.0.1:9192",
        "ORRERY_A2A_JWT_ISSUER": "http://127.0.0.1:8090",
        "ORRERY_A2A_JWKS_URL": "http://127.0.0.1:8090/.well-known/jwks.json",
        "ORRERY_A2A_JWT_AUDIENCE": "orrery-a2a",
        "ORRERY_CONSOLE_JWT_AUDIENCE": "orrery-console",
        "ORRERY_CONSOLE_CLIENTS": "dev-console",
        "ORRERY_A2A_JWT_ALGORITHMS": "ES256",
        "ORRERY_A2A_ASSERTION_KEYS": WIRING.assertion_keys,
    }


def test_adapter_is_wired_to_the_same_keys_and_envoys_url() -> None:
    """The adapter gets its address, the same assertion keys and the public /a2a URL."""
    assert adapter_env(StackSettings.from_env({}), WIRING) == {
        "ORRERY_A2A_ADAPTER_ADDR": "127.0.0.1:8081",
        "ORRERY_A2A_ASSERTION_KEYS": WIRING.assertion_keys,
        "ORRERY_A2A_PUBLIC_URL": "http://127.0.0.1:8080/a2a",
    }


def test_children_inherit_the_environment_but_the_wiring_wins() -> None:
    """User variables pass through; wired ones override; a JWKS file would conflict and the
    user's bearer token is none of the components' business, so both go."""
    env = child_env(
        {
            "ORRERY_A2A_RATE_LIMIT": "5/minute",
            "ORRERY_A2A_JWT_ISSUER": "https://idp",
            "ORRERY_A2A_JWKS_FILE": "/k",
            "ORRERY_A2A_TOKEN": "a.b.c",
        },
        {"ORRERY_A2A_JWT_ISSUER": "http://127.0.0.1:8090"},
    )
    assert env["ORRERY_A2A_RATE_LIMIT"] == "5/minute"
    assert env["ORRERY_A2A_JWT_ISSUER"] == "http://127.0.0.1:8090"
    assert "ORRERY_A2A_JWKS_FILE" not in env
    assert "ORRERY_A2A_TOKEN" not in env
    assert env["PYTHONUNBUFFERED"] == "1"


def test_replicas_take_free_ports_and_the_adapters_must_share_state() -> None:
    """With replicas, authz and adapters bind port 0 on their hosts; adapters get
    ORRERY_MULTI_REPLICA=true, so they refuse to start without PostgreSQL and Redis."""
    settings = StackSettings.from_env({"ORRERY_A2A_REPLICAS": "2"})
    authz = authz_env(settings, WIRING)
    adapter = adapter_env(settings, WIRING)
    assert (authz["ORRERY_A2A_AUTHZ_ADDR"], authz["ORRERY_A2A_AUTHZ_DIAG_ADDR"]) == (
        "127.0.0.1:0",
        "127.0.0.1:0",
    )
    assert adapter["ORRERY_A2A_ADAPTER_ADDR"] == "127.0.0.1:0"
    assert adapter["ORRERY_MULTI_REPLICA"] == "true"


def test_replicas_are_bounded() -> None:
    """ORRERY_A2A_REPLICAS is 1 to 8."""
    for bad in ("0", "9", "two"):
        with pytest.raises(ConfigError, match="ORRERY_A2A_REPLICAS"):
            StackSettings.from_env({"ORRERY_A2A_REPLICAS": bad})


def test_the_http_transport_gives_authz_its_address() -> None:
    """ORRERY_A2A_AUTHZ_TRANSPORT=http: authz gets ORRERY_A2A_AUTHZ_HTTP_ADDR (default 9194);
    with gRPC (the default) it gets none; another value is a problem named at once."""
    http = StackSettings.from_env({"ORRERY_A2A_AUTHZ_TRANSPORT": "HTTP"})
    assert http.authz_transport == "http"
    assert authz_env(http, WIRING)["ORRERY_A2A_AUTHZ_HTTP_ADDR"] == "127.0.0.1:9194"
    grpc = StackSettings.from_env({})
    assert grpc.authz_transport == "grpc"
    assert "ORRERY_A2A_AUTHZ_HTTP_ADDR" not in authz_env(grpc, WIRING)
    with pytest.raises(ConfigError) as failed:
        StackSettings.from_env({"ORRERY_A2A_AUTHZ_TRANSPORT": "smoke-signals"})
    assert failed.value.problems[0].startswith("ORRERY_A2A_AUTHZ_TRANSPORT")
