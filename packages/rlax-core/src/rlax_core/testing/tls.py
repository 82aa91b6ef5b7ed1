"""Throwaway TLS material for tests of networked transports.

Each call makes a fresh CA and a server certificate for ``127.0.0.1``/``localhost``
signed by it (through :mod:`rlax_core.transport.certificates`, as a run's own material
is made), so TLS tests run against real certificate checks without any fixed keys in
the repository.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rlax_core.transport.certificates import issue_certificate, make_authority


@dataclass(frozen=True)
class TestCertificates:
    """PEM files written by :func:`make_test_certificates`.

    Attributes:
        ca_file: the CA certificate clients trust.
        server_cert_file / server_key_file: the server's certificate and key.
        other_ca_file: a second, unrelated CA (a client trusting only it must fail).
        client_cert_file / client_key_file: a client certificate the CA signed (mutual TLS).
        other_client_cert_file / other_client_key_file: a client certificate the unrelated
            CA signed (a server verifying clients must refuse it).
    """

    __test__ = False  # not a pytest test class

    ca_file: Path
    server_cert_file: Path
    server_key_file: Path
    other_ca_file: Path
    client_cert_file: Path
    client_key_file: Path
    other_client_cert_file: Path
    other_client_key_file: Path


def make_test_certificates(folder: Path) -> TestCertificates:
    """Writes a CA, a server certificate for 127.0.0.1, client certificates and an
    unrelated CA into ``folder``."""
    authority = make_authority("rlax test CA", valid_days=1)
    other = make_authority("unrelated CA", valid_days=1)
    folder.mkdir(parents=True, exist_ok=True)
    files = TestCertificates(
        ca_file=folder / "ca.pem",
        server_cert_file=folder / "server.pem",
        server_key_file=folder / "server-key.pem",
        other_ca_file=folder / "other-ca.pem",
        client_cert_file=folder / "client.pem",
        client_key_file=folder / "client-key.pem",
        other_client_cert_file=folder / "other-client.pem",
        other_client_key_file=folder / "other-client-key.pem",
    )
    files.ca_file.write_bytes(authority.certificate_pem())
    files.other_ca_file.write_bytes(other.certificate_pem())
    issue_certificate(
        authority, "localhost", hosts=["localhost", "127.0.0.1"], server=True, valid_days=1
    ).write(files.server_cert_file, files.server_key_file)
    issue_certificate(authority, "worker", client=True, valid_days=1).write(
        files.client_cert_file, files.client_key_file
    )
    issue_certificate(other, "worker", client=True, valid_days=1).write(
        files.other_client_cert_file, files.other_client_key_file
    )
    return files
