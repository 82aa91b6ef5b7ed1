"""Fixtures shared by the verifier tests: one local sandbox per session, a host TCP port."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from rlax_verifiers.sandbox.docker.backend import DockerSandbox, DockerSandboxConfig
from rlax_verifiers.sandbox.local import LocalSandbox, LocalSandboxConfig

FIRST_UID = 62000
WORKERS = 2


@pytest.fixture(scope="session")
def local_sandbox() -> Iterator[LocalSandbox]:
    """A started local sandbox, shared by the session's tests."""
    sandbox = LocalSandbox(
        LocalSandboxConfig(workers=WORKERS, first_uid=FIRST_UID, compile_time_limit_s=5.0)
    )
    yield sandbox
    sandbox.close()


@pytest.fixture(scope="session")
def host_port() -> Iterator[int]:
    """A TCP port the host listens on (the sandbox must not reach it)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    yield server.getsockname()[1]
    server.close()


@pytest.fixture(scope="session")
def docker_sandbox() -> Iterator[DockerSandbox]:
    """The docker sandbox, its images built (or found) once per session."""
    sandbox = DockerSandbox(DockerSandboxConfig(workers=2, compile_time_limit_s=5.0))
    yield sandbox
    sandbox.close()
