"""Rendering envoy/envoy.yaml for other addresses: only the named sockets change."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from stack import cli, envoy_config
from stack.envoy_config import EnvoyConfigError
from tests.e2e.conftest import envoy_validate

SOURCE = envoy_config.repo_config_path()


def _sockets(config: envoy_config.Config) -> list[dict[str, object]]:
    return [
        envoy_config.listener_socket(config),
        envoy_config.listener_socket(config, envoy_config.DIAG_LISTENER),
        envoy_config.admin_socket(config),
        *envoy_config.cluster_sockets(config, envoy_config.ADMIN_CLUSTER),
        *envoy_config.cluster_sockets(config, "authz"),
        *envoy_config.cluster_sockets(config, "adapter"),
    ]


def test_render_replaces_only_the_named_sockets() -> None:
    """Both listeners, admin (and the cluster that reaches it) and the two clusters move; every
    other byte of config stays."""
    source = envoy_config.load(SOURCE)
    rendered = envoy_config.render(
        source,
        listen=("0.0.0.0", 18080),
        diag=("0.0.0.0", 19902),
        admin=("127.0.0.1", 19901),
        authz=("127.0.0.1", 19191),
        adapter=("127.0.0.1", 18081),
    )
    assert [(s["address"], s["port_value"]) for s in _sockets(rendered)] == [
        ("0.0.0.0", 18080),
        ("0.0.0.0", 19902),
        ("127.0.0.1", 19901),
        ("127.0.0.1", 19901),
        ("127.0.0.1", 19191),
        ("127.0.0.1", 18081),
    ]
    restored = copy.deepcopy(rendered)
    for original, socket in zip(_sockets(source), _sockets(restored), strict=True):
        socket.update(original)
    assert restored == source
    assert envoy_config.listener_socket(source)["address"] == "127.0.0.1"  # source untouched


def test_several_upstream_addresses_become_one_endpoint_each() -> None:
    """Replicas: the cluster balances over every given address, each endpoint shaped alike."""
    source = envoy_config.load(SOURCE)
    replicas = [("127.0.0.1", 18081), ("127.0.0.1", 18082)]
    rendered = envoy_config.render(source, adapter=replicas, authz=[("127.0.0.1", 19191)])
    sockets = envoy_config.cluster_sockets(rendered, "adapter")
    assert [(s["address"], s["port_value"]) for s in sockets] == replicas
    assert envoy_config.cluster_sockets(rendered, "authz") == [
        {"address": "127.0.0.1", "port_value": 19191}
    ]
    assert len(envoy_config.cluster_sockets(source, "adapter")) == 1  # source untouched


def _health_ports(config: envoy_config.Config) -> list[int | None]:
    """The port each adapter endpoint is health-checked on (None: its own)."""
    clusters = config["static_resources"]["clusters"]
    (adapter,) = [cluster for cluster in clusters if cluster["name"] == "adapter"]
    return [
        lb["endpoint"].get("health_check_config", {}).get("port_value")
        for group in adapter["load_assignment"]["endpoints"]
        for lb in group["lb_endpoints"]
    ]


def test_the_adapter_is_health_checked_on_its_own_port_unless_told_otherwise() -> None:
    """Without `adapter_health_port` /readyz is asked on the A2A port (the local stack); with it,
    every adapter endpoint is asked there (a pod, whose adapter serves /readyz on 9193)."""
    source = envoy_config.load(SOURCE)
    replicas = [("127.0.0.1", 18081), ("127.0.0.1", 18082)]
    assert _health_ports(envoy_config.render(source, adapter=replicas)) == [None, None]
    rendered = envoy_config.render(source, adapter=replicas, adapter_health_port=9193)
    assert _health_ports(rendered) == [9193, 9193]


@pytest.mark.parametrize(
    ("args", "env", "port"),
    [
        ([], {}, None),
        ([], {"ORRERY_A2A_ADAPTER_DIAG_ADDR": "127.0.0.1:9193"}, 9193),
        (["--adapter-health-port", "9300"], {"ORRERY_A2A_ADAPTER_DIAG_ADDR": "0.0.0.0:9193"}, 9300),
    ],
)
def test_envoy_config_asks_readyz_where_the_adapter_serves_it(
    tmp_path: Path, args: list[str], env: dict[str, str], port: int | None
) -> None:
    """The flag, else the port of the adapter's diagnostics address (compose passes it)."""
    out = tmp_path / "envoy.yaml"
    assert cli.main(["envoy-config", *args, "--out", str(out)], env=env) == 0
    assert _health_ports(envoy_config.load(out)) == [port]


def test_unset_sockets_keep_the_files_values() -> None:
    """Rendering only the listener leaves admin and clusters as the file has them."""
    source = envoy_config.load(SOURCE)
    rendered = envoy_config.render(source, listen=("0.0.0.0", 8080))
    assert _sockets(rendered)[1:] == _sockets(source)[1:]


def test_a_renamed_listener_fails_loudly() -> None:
    """A file without the `public` listener is an error naming it, not a silent no-op."""
    source = envoy_config.load(SOURCE)
    source["static_resources"]["listeners"][0]["name"] = "renamed"
    with pytest.raises(EnvoyConfigError, match="no listener named 'public'"):
        envoy_config.render(source, listen=("127.0.0.1", 1))


def test_a_missing_cluster_fails_loudly() -> None:
    """A file without the `authz` cluster is an error naming it."""
    source = envoy_config.load(SOURCE)
    source["static_resources"]["clusters"] = source["static_resources"]["clusters"][1:]
    with pytest.raises(EnvoyConfigError, match="no cluster named 'authz'"):
        envoy_config.render(source, authz=("127.0.0.1", 1))


def test_unreadable_or_invalid_files_are_clear_errors(tmp_path: Path) -> None:
    """Missing file, bad YAML and a non-mapping are each a one-line error."""
    with pytest.raises(EnvoyConfigError, match="cannot read"):
        envoy_config.load(tmp_path / "absent.yaml")
    (tmp_path / "bad.yaml").write_text("a: [")
    with pytest.raises(EnvoyConfigError, match="not valid YAML"):
        envoy_config.load(tmp_path / "bad.yaml")
    (tmp_path / "list.yaml").write_text("- 1\n")
    with pytest.raises(EnvoyConfigError, match="not an Envoy bootstrap"):
        envoy_config.load(tmp_path / "list.yaml")


def test_a_config_that_asks_for_python_objects_is_refused_unbuilt(tmp_path: Path) -> None:
    """The bootstrap is operator input read with a safe loader: a `!!python/...` tag is invalid
    YAML here, and nothing it names is called (a loader that builds objects would run it)."""
    marker = tmp_path / "ran"
    (tmp_path / "evil.yaml").write_text(f"admin: !!python/object/apply:os.mkdir ['{marker}']\n")
    with pytest.raises(EnvoyConfigError, match="not valid YAML"):
        envoy_config.load(tmp_path / "evil.yaml")
    assert not marker.exists()


@pytest.mark.envoy
def test_envoy_config_command_renders_a_file_envoy_accepts(tmp_path: Path) -> None:
    """`orrery-a2a envoy-config --listen 0.0.0.0:8080 --out F` (what compose runs): a 0644 file
    that `envoy --mode validate` accepts, listening on 0.0.0.0."""
    out = tmp_path / "envoy.yaml"
    assert cli.main(["envoy-config", "--listen", "0.0.0.0:8080", "--out", str(out)], env={}) == 0
    assert out.stat().st_mode & 0o777 == 0o644
    rendered = yaml.safe_load(out.read_text())
    assert envoy_config.listener_socket(rendered) == {"address": "0.0.0.0", "port_value": 8080}
    result = envoy_validate(out)
    assert result.returncode == 0, result.stderr


def test_envoy_config_command_prints_to_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    """Without --out the rendered YAML goes to stdout."""
    assert cli.main(["envoy-config", "--admin", "127.0.0.1:9999"], env={}) == 0
    rendered = yaml.safe_load(capsys.readouterr().out)
    assert envoy_config.admin_socket(rendered)["port_value"] == 9999


def test_envoy_config_command_reports_a_bad_source(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A missing source file: exit 2 and one line."""
    assert cli.main(["envoy-config", "--source", str(tmp_path / "nope.yaml")], env={}) == 2
    assert capsys.readouterr().err.startswith("orrery-a2a envoy-config: cannot read")


def test_render_refuses_a_non_loopback_admin_address() -> None:
    """The admin API never leaves loopback, whoever renders (up, compose, a pod)."""
    with pytest.raises(EnvoyConfigError, match="admin API binds loopback only"):
        envoy_config.render(envoy_config.load(SOURCE), admin=("0.0.0.0", 9901))


@pytest.mark.envoy
def test_an_admin_socket_path_puts_the_admin_api_on_a_0600_unix_socket(tmp_path: Path) -> None:
    """`admin=Path` (the local stack): the admin API and the diag listener's cluster to it use
    that Unix socket, mode 0600, and no TCP address at all; Envoy accepts the file."""
    path = tmp_path / "envoy-admin.sock"
    rendered = envoy_config.render(envoy_config.load(SOURCE), admin=path)
    assert rendered["admin"]["address"] == {"pipe": {"path": str(path), "mode": 0o600}}
    clusters = rendered["static_resources"]["clusters"]
    (admin_cluster,) = [c for c in clusters if c["name"] == envoy_config.ADMIN_CLUSTER]
    endpoints = admin_cluster["load_assignment"]["endpoints"][0]["lb_endpoints"]
    assert [lb["endpoint"]["address"] for lb in endpoints] == [{"pipe": {"path": str(path)}}]
    out = tmp_path / "envoy.yaml"
    envoy_config.write(rendered, out)
    result = envoy_validate(out)
    assert result.returncode == 0, result.stderr


def test_an_admin_socket_path_too_long_for_a_unix_socket_is_refused(tmp_path: Path) -> None:
    """A socket path over 107 bytes cannot be bound: a clear error here, not Envoy's later."""
    path = tmp_path / ("s" * 108)
    with pytest.raises(EnvoyConfigError, match="a Unix socket path has at most 107"):
        envoy_config.render(envoy_config.load(SOURCE), admin=path)


def test_envoy_config_command_refuses_a_non_loopback_admin_address(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`envoy-config --admin 0.0.0.0:9901`: exit 2 and why."""
    assert cli.main(["envoy-config", "--admin", "0.0.0.0:9901"], env={}) == 2
    assert "admin API binds loopback only" in capsys.readouterr().err


def test_tls_adds_a_transport_socket_to_the_public_listener_only() -> None:
    """TLS 1.2+, h2 and http/1.1 by ALPN, the given PEM files, HSTS; diag stays plain HTTP."""
    source = envoy_config.load(SOURCE)
    tls = envoy_config.TlsFiles(Path("/tls/tls.crt"), Path("/tls/tls.key"))
    rendered = envoy_config.render(source, tls=tls)
    socket = envoy_config.listener(rendered)["filter_chains"][0]["transport_socket"]
    context = socket["typed_config"]
    assert socket["name"] == envoy_config.TLS_SOCKET
    assert context["@type"] == envoy_config.DOWNSTREAM_TLS
    common = context["common_tls_context"]
    assert common["tls_params"] == {"tls_minimum_protocol_version": "TLSv1_2"}
    assert common["alpn_protocols"] == ["h2", "http/1.1"]
    assert common["tls_certificates"] == [
        {
            "certificate_chain": {"filename": "/tls/tls.crt"},
            "private_key": {"filename": "/tls/tls.key"},
        }
    ]
    assert "require_client_certificate" not in context
    assert "validation_context" not in common
    diag = envoy_config.listener(rendered, envoy_config.DIAG_LISTENER)
    assert "transport_socket" not in diag["filter_chains"][0]
    manager = envoy_config.listener(rendered)["filter_chains"][0]["filters"][0]["typed_config"]
    (hsts,) = manager["route_config"]["response_headers_to_add"]
    assert hsts["header"] == {"key": "strict-transport-security", "value": envoy_config.HSTS}


def test_client_ca_requires_a_client_certificate() -> None:
    """mTLS: the CA file validates peers and a client certificate is required, not optional."""
    tls = envoy_config.TlsFiles(Path("/c"), Path("/k"), client_ca=Path("/ca.crt"))
    rendered = envoy_config.render(envoy_config.load(SOURCE), tls=tls)
    context = envoy_config.listener(rendered)["filter_chains"][0]["transport_socket"]
    assert context["typed_config"]["require_client_certificate"] is True
    common = context["typed_config"]["common_tls_context"]
    assert common["validation_context"] == {"trusted_ca": {"filename": "/ca.crt"}}


@pytest.mark.parametrize(
    ("flags", "problem"),
    [
        (["--tls-cert", "/c"], "give both or neither"),
        (["--tls-key", "/k"], "give both or neither"),
        (["--client-ca", "/ca"], "needs --tls-cert and --tls-key"),
    ],
)
def test_envoy_config_command_refuses_half_a_tls_configuration(
    flags: list[str], problem: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A certificate without its key (or a client CA without TLS) is exit 2, never plain HTTP."""
    assert cli.main(["envoy-config", *flags], env={}) == 2
    assert problem in capsys.readouterr().err


def test_envoy_config_takes_tls_from_the_environment_too(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """ORRERY_A2A_TLS_CERT/_KEY/_CLIENT_CA (what compose sets) render exactly like the flags;
    empty values mean unset."""
    flags = ["--tls-cert", "/t/c.pem", "--tls-key", "/t/k.pem", "--client-ca", "/t/ca.pem"]
    assert cli.main(["envoy-config", *flags], env={}) == 0
    by_flags = capsys.readouterr().out
    env = {
        "ORRERY_A2A_TLS_CERT": "/t/c.pem",
        "ORRERY_A2A_TLS_KEY": "/t/k.pem",
        "ORRERY_A2A_TLS_CLIENT_CA": "/t/ca.pem",
    }
    assert cli.main(["envoy-config"], env=env) == 0
    assert capsys.readouterr().out == by_flags
    assert cli.main(["envoy-config"], env=dict.fromkeys(env, "")) == 0
    plain = yaml.safe_load(capsys.readouterr().out)
    assert "transport_socket" not in envoy_config.listener(plain)["filter_chains"][0]


@pytest.mark.envoy
def test_tls_reload_renders_sds_files_beside_the_bootstrap(tmp_path: Path) -> None:
    """`--tls-reload true` (ORRERY_A2A_TLS_RELOAD): the listener takes its certificate and
    client CA by SDS from files written beside --out, each watching its PEM files' directory
    (tests/e2e/test_tls_reload.py shows a rotation served); Envoy accepts the result."""
    from tests.certs import make_certs

    certs = make_certs(tmp_path / "certs")
    out = tmp_path / "rendered" / "envoy.yaml"
    out.parent.mkdir()
    flags = ["--tls-cert", str(certs.server_cert), "--tls-key", str(certs.server_key)]
    flags += ["--client-ca", str(certs.ca), "--out", str(out)]
    assert cli.main(["envoy-config", *flags], env={"ORRERY_A2A_TLS_RELOAD": "true"}) == 0
    rendered = yaml.safe_load(out.read_text())
    context = envoy_config.listener(rendered)["filter_chains"][0]["transport_socket"]
    common = context["typed_config"]["common_tls_context"]
    assert "tls_certificates" not in common and "validation_context" not in common
    assert context["typed_config"]["require_client_certificate"] is True
    assert sorted(p.name for p in out.parent.iterdir()) == [
        "client_ca.yaml",
        "envoy.yaml",
        "public_tls.yaml",
    ]
    (certificate,) = yaml.safe_load((out.parent / "public_tls.yaml").read_text())["resources"]
    assert certificate["tls_certificate"]["watched_directory"] == {"path": str(certs.ca.parent)}
    (ca,) = yaml.safe_load((out.parent / "client_ca.yaml").read_text())["resources"]
    assert ca["validation_context"]["trusted_ca"] == {"filename": str(certs.ca)}
    result = envoy_validate(out)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    "flags",
    [["--tls-reload", "true"], ["--tls-reload", "true", "--tls-cert", "/c", "--tls-key", "/k"]],
)
def test_tls_reload_needs_tls_and_an_output_file(
    flags: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Without certificates there is nothing to reload, without --out nowhere to put the SDS
    files: exit 2, saying so."""
    assert cli.main(["envoy-config", *flags], env={}) == 2
    assert "--tls-reload: needs" in capsys.readouterr().err


def _ext_authz(config: envoy_config.Config) -> dict[str, object]:
    filters = envoy_config.public_manager(config)["http_filters"]
    (found,) = [f for f in filters if f["name"] == envoy_config.EXT_AUTHZ]
    typed: dict[str, object] = found["typed_config"]
    return typed


def test_the_http_transport_changes_only_how_ext_authz_calls_authz() -> None:
    """grpc_service becomes an http_service on the same cluster, timeout and retries, under the
    check prefix, passing only the contract's headers; the cluster speaks HTTP/1.1 and is
    health-checked on the transport's /healthz instead of gRPC health; nothing else of the
    filter or the file changes."""
    source = envoy_config.load(SOURCE)
    rendered = envoy_config.render(source, authz=("127.0.0.1", 19194), authz_transport="http")
    http = _ext_authz(rendered)
    grpc = _ext_authz(source)
    assert {k: v for k, v in http.items() if k != "http_service"} == {
        k: v for k, v in grpc.items() if k != "grpc_service"
    }
    assert list(http) == [("http_service" if k == "grpc_service" else k) for k in grpc]
    grpc_service = grpc["grpc_service"]
    assert isinstance(grpc_service, dict)
    assert http["http_service"] == {
        "server_uri": {"uri": "http://authz", "cluster": "authz", "timeout": "1s"},
        "path_prefix": "/ext_authz",
        "authorization_response": {
            "allowed_upstream_headers": {
                "patterns": [{"exact": "x-orrery-principal"}, {"exact": "x-orrery-trace-link"}]
            },
            "allowed_client_headers": {
                "patterns": [
                    {"exact": name}
                    for name in (
                        "content-type",
                        "cache-control",
                        "www-authenticate",
                        "retry-after",
                        "ratelimit-policy",
                        "ratelimit",
                    )
                ]
            },
        },
        "retry_policy": grpc_service["retry_policy"],
    }
    clusters = rendered["static_resources"]["clusters"]
    (authz,) = [c for c in clusters if c["name"] == "authz"]
    options = authz["typed_extension_protocol_options"][envoy_config.HTTP_OPTIONS]
    assert options["explicit_http_config"] == {"http_protocol_options": {}}
    ((check,),) = [c["health_checks"] for c in clusters if c["name"] == "authz"]
    assert "grpc_health_check" not in check
    assert check["http_health_check"] == {"path": "/healthz"}
    assert envoy_config.cluster_sockets(rendered, "authz") == [
        {"address": "127.0.0.1", "port_value": 19194}
    ]


@pytest.mark.envoy
def test_envoy_accepts_the_http_transport(tmp_path: Path) -> None:
    """`envoy --mode validate` on the file rendered for the HTTP transport."""
    path = tmp_path / "envoy.yaml"
    envoy_config.write(envoy_config.render(envoy_config.load(SOURCE), authz_transport="http"), path)
    result = envoy_validate(path)
    assert result.returncode == 0, result.stderr


def test_envoy_config_command_needs_the_http_address_for_the_http_transport(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--authz-transport http without --authz-http is exit 2 (the file's endpoint is gRPC's);
    with it, the authz cluster points there; the variable works like the flag."""
    assert cli.main(["envoy-config", "--authz-transport", "http"], env={}) == 2
    assert "--authz-http" in capsys.readouterr().err
    flags = ["--authz-http", "127.0.0.1:9194"]
    assert cli.main(["envoy-config", "--authz-transport", "http", *flags], env={}) == 0
    by_flag = capsys.readouterr().out
    assert cli.main(["envoy-config", *flags], env={"ORRERY_A2A_AUTHZ_TRANSPORT": "http"}) == 0
    assert capsys.readouterr().out == by_flag
    rendered = yaml.safe_load(by_flag)
    assert "http_service" in _ext_authz(rendered)
    assert envoy_config.cluster_sockets(rendered, "authz")[0]["port_value"] == 9194
    assert cli.main(["envoy-config", *flags], env={}) == 0  # gRPC: --authz-http is unused
    assert "grpc_service" in _ext_authz(yaml.safe_load(capsys.readouterr().out))
