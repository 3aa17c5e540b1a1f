"""A rotated certificate is served without restarting Envoy (TLS through SDS, a watched directory).

The certificate files sit in a directory laid out as the kubelet lays out a Secret volume: the
files are links through `..data`, itself a link to a timestamped directory, and an update swaps
`..data` in one rename. cert-manager renewing the Secret does exactly this; Envoy with static
file names would keep the old certificate until restarted.
"""

from __future__ import annotations

import asyncio
import shutil
import ssl
from pathlib import Path

import pytest
from cryptography import x509

from stack import envoy_config
from tests.certs import make_certs
from tests.e2e.conftest import envoy_for
from tests.waiting import eventually

pytestmark = [pytest.mark.envoy, pytest.mark.e2e]

FILES = ("tls.crt", "tls.key")


def _publish(volume: Path, version: str, source: Path) -> None:
    """Put `source`'s certificate and key into `volume` as the kubelet updates a Secret volume."""
    data = volume / f"..{version}"
    data.mkdir()
    for name in FILES:
        shutil.copyfile(source / name, data / name)
    link = volume / "..data_tmp"
    link.symlink_to(data.name)
    link.replace(volume / "..data")  # one atomic rename, as the kubelet does
    for name in FILES:
        if not (volume / name).is_symlink():
            (volume / name).symlink_to(Path("..data") / name)


async def _served_serial(port: int) -> int:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
    try:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    finally:
        writer.close()
    return x509.load_der_x509_certificate(der).serial_number


def _serial(path: Path) -> int:
    return x509.load_pem_x509_certificate(path.read_bytes()).serial_number


async def test_a_renewed_secret_is_served_without_a_restart(
    tmp_path: Path, closed_port: int
) -> None:
    """After the Secret volume's `..data` swap, new connections get the new certificate from the
    same Envoy process."""
    first, second = make_certs(tmp_path / "first"), make_certs(tmp_path / "second")
    volume = tmp_path / "tls"
    volume.mkdir()
    _publish(volume, "v1", first.server_cert.parent)
    rendered = tmp_path / "rendered"
    rendered.mkdir()
    tls = envoy_config.TlsFiles(volume / "tls.crt", volume / "tls.key", sds_dir=rendered)
    port = closed_port
    async with envoy_for(tmp_path, authz_port=port, adapter_port=port, tls=tls) as envoy:
        assert await _served_serial(envoy.port) == _serial(first.server_cert)
        _publish(volume, "v2", second.server_cert.parent)

        async def renewed() -> bool:
            return await _served_serial(envoy.port) == _serial(second.server_cert)

        await eventually(renewed, timeout=20)
        assert envoy.process.poll() is None  # the same process, never restarted
