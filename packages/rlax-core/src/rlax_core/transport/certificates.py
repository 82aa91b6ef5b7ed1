"""X.509 material for a run's transport: a CA, and certificates it signs for the server
and, for mutual TLS, for each role.

Made with ``cryptography``; the keys are ECDSA P-256, which both nats-server and gRPC's
TLS accept. A run's CA lives as long as the run (``valid_days``); nothing here is meant
to replace an organisation's PKI: a user who has one gives the launcher its files instead.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_PEM = serialization.Encoding.PEM


@dataclass(frozen=True)
class Authority:
    """A certificate authority: its key and its self-signed certificate."""

    key: ec.EllipticCurvePrivateKey
    certificate: x509.Certificate

    def certificate_pem(self) -> bytes:
        return self.certificate.public_bytes(_PEM)

    def key_pem(self) -> bytes:
        """The CA's private key (to issue more certificates later; mount it nowhere)."""
        return self.key.private_bytes(
            _PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )


@dataclass(frozen=True)
class IssuedCertificate:
    """A certificate the authority signed, with its private key, as PEM."""

    certificate_pem: bytes
    key_pem: bytes

    def write(self, certificate_file: Path, key_file: Path) -> None:
        """Writes both files; the key readable by its owner only."""
        certificate_file.write_bytes(self.certificate_pem)
        write_private(key_file, self.key_pem)


def write_private(path: Path, content: bytes) -> None:
    """Writes ``content`` to ``path`` with mode 600 from the start (never world-readable)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    with open(path, "xb", opener=lambda name, flags: os.open(name, flags, 0o600)) as handle:
        handle.write(content)


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def make_authority(common_name: str, *, valid_days: int = 365) -> Authority:
    """A new CA (its certificate may sign server and client certificates)."""
    now = dt.datetime.now(dt.UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    usage = x509.KeyUsage(
        digital_signature=True, content_commitment=False, key_encipherment=False,
        data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
        encipher_only=False, decipher_only=False,
    )  # fmt: skip
    certificate = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(_name(common_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=valid_days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(usage, critical=True)
        .sign(key, hashes.SHA256())
    )
    return Authority(key, certificate)


def issue_certificate(
    authority: Authority,
    common_name: str,
    *,
    hosts: list[str] = (),  # type: ignore[assignment]
    server: bool = False,
    client: bool = False,
    valid_days: int = 365,
) -> IssuedCertificate:
    """A certificate for ``common_name`` signed by ``authority``.

    Args:
        authority: the signing CA.
        common_name: the subject, e.g. ``rlax-transport`` or a role's name.
        hosts: DNS names and IP addresses the certificate is valid for (a server's).
        server: usable by a TLS server.
        client: usable by a TLS client (mutual TLS).
        valid_days: how long it is valid.
    """
    now = dt.datetime.now(dt.UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(authority.certificate.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=valid_days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
    )
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    usages = [ExtendedKeyUsageOID.SERVER_AUTH] * server + [ExtendedKeyUsageOID.CLIENT_AUTH] * client
    if usages:
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    certificate = builder.sign(authority.key, hashes.SHA256())
    key_pem = key.private_bytes(
        _PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return IssuedCertificate(certificate.public_bytes(_PEM), key_pem)
