"""Throwaway X.509 material for TLS tests, made at test time (never committed).

`make_certs(directory)` writes a CA, a server certificate for localhost/127.0.0.1 signed by it, a
client certificate signed by it, and a client certificate from an unrelated CA (the "wrong"
client), all as PEM files, EC P-256, valid for a day.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Certs:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    stranger_cert: Path
    stranger_key: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _write_cert(cert: x509.Certificate, path: Path) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _issue(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: tuple[x509.Name, ec.EllipticCurvePrivateKey] | None,
    *,
    ca: bool = False,
    usage: x509.ObjectIdentifier | None = None,
    alt_names: list[x509.GeneralName] | None = None,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    issuer_name, issuer_key = issuer if issuer is not None else (_name(subject), key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if usage is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if alt_names:
        builder = builder.add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _client(
    issuer: tuple[x509.Name, ec.EllipticCurvePrivateKey],
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A client certificate (and its key) for the same agent name, signed by `issuer`."""
    key = ec.generate_private_key(ec.SECP256R1())
    return _issue("agent.example", key, issuer, usage=ExtendedKeyUsageOID.CLIENT_AUTH), key


def make_certs(directory: Path) -> Certs:
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _issue("orrery test CA", ca_key, None, ca=True)
    stranger_ca_key = ec.generate_private_key(ec.SECP256R1())
    stranger_ca = _issue("someone else's CA", stranger_ca_key, None, ca=True)
    server_key = ec.generate_private_key(ec.SECP256R1())
    server = _issue(
        "localhost",
        server_key,
        (ca.subject, ca_key),
        usage=ExtendedKeyUsageOID.SERVER_AUTH,
        alt_names=[
            x509.DNSName("localhost"),
            x509.IPAddress(ipaddress.IPv4Address("127.0.0.1")),
        ],
    )
    client, client_key = _client((ca.subject, ca_key))
    stranger, stranger_key = _client((stranger_ca.subject, stranger_ca_key))
    certs = Certs(
        ca=directory / "ca.crt",
        server_cert=directory / "tls.crt",
        server_key=directory / "tls.key",
        client_cert=directory / "client.crt",
        client_key=directory / "client.key",
        stranger_cert=directory / "stranger.crt",
        stranger_key=directory / "stranger.key",
    )
    _write_cert(ca, certs.ca)
    _write_cert(server, certs.server_cert)
    _write_key(server_key, certs.server_key)
    _write_cert(client, certs.client_cert)
    _write_key(client_key, certs.client_key)
    _write_cert(stranger, certs.stranger_cert)
    _write_key(stranger_key, certs.stranger_key)
    return certs
