"""Throwaway TLS material for tests of networked transports (needs ``cryptography``).

Each call makes a fresh CA and a server certificate for ``127.0.0.1``/``localhost``
signed by it, so TLS tests run against real certificate checks without any fixed keys
in the repository.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class TestCertificates:
    """PEM files written by :func:`make_test_certificates`.

    Attributes:
        ca_file: the CA certificate clients trust.
        server_cert_file / server_key_file: the server's certificate and key.
        other_ca_file: a second, unrelated CA (a client trusting only it must fail).
    """

    __test__ = False  # not a pytest test class

    ca_file: Path
    server_cert_file: Path
    server_key_file: Path
    other_ca_file: Path


def make_test_certificates(folder: Path) -> TestCertificates:
    """Writes a CA, a server certificate for 127.0.0.1 and an unrelated CA into ``folder``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = dt.datetime.now(dt.UTC)

    def name(common: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])

    def ca(common: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (
            x509.CertificateBuilder()
            .subject_name(name(common))
            .issuer_name(name(common))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True, content_commitment=False, key_encipherment=False,
                    data_encipherment=False, key_agreement=False, key_cert_sign=True,
                    crl_sign=True, encipher_only=False, decipher_only=False,
                ),
                critical=True,
            )
            .sign(key, hashes.SHA256())
        )  # fmt: skip
        return key, cert

    ca_key, ca_cert = ca("rlax test CA")
    _, other_cert = ca("unrelated CA")
    server_key = ec.generate_private_key(ec.SECP256R1())
    server_cert = (
        x509.CertificateBuilder()
        .subject_name(name("localhost"))
        .issuer_name(ca_cert.subject)
        .public_key(server_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    folder.mkdir(parents=True, exist_ok=True)
    pem = serialization.Encoding.PEM
    files = TestCertificates(
        ca_file=folder / "ca.pem",
        server_cert_file=folder / "server.pem",
        server_key_file=folder / "server-key.pem",
        other_ca_file=folder / "other-ca.pem",
    )
    files.ca_file.write_bytes(ca_cert.public_bytes(pem))
    files.other_ca_file.write_bytes(other_cert.public_bytes(pem))
    files.server_cert_file.write_bytes(server_cert.public_bytes(pem))
    files.server_key_file.write_bytes(
        server_key.private_bytes(
            pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    files.server_key_file.chmod(0o600)
    return files
