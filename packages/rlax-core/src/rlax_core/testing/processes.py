"""Real ``rlax`` processes for tests: start one, start the parameter server, pause one,
stop one."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import pytest

SERVE_TIMEOUT_S = 60  # a bound on a hang: start-up of `rlax serve` on a busy host


def rlax(*args: str | Path, env: Mapping[str, str] | None = None) -> subprocess.Popen:
    """``rlax ARGS...`` as a child process, its output captured as text."""
    return subprocess.Popen(
        [sys.executable, "-m", "rlax_core.cli", *map(str, args)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=None if env is None else dict(env),
    )  # fmt: skip


def serve(config: Path) -> subprocess.Popen:
    """``rlax serve param-server --config CONFIG``, once it says it is serving."""
    server = rlax("serve", "param-server", "--config", config)
    deadline = time.monotonic() + SERVE_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.stdout.readline().startswith("serving"):
            return server
        if server.poll() is not None:
            pytest.fail(f"rlax serve exited {server.returncode}: {server.stderr.read()[-3000:]}")
    server.kill()
    pytest.fail(f"rlax serve did not start within {SERVE_TIMEOUT_S} s")


@contextmanager
def paused(process: subprocess.Popen) -> Iterator[None]:
    """The process held still (SIGSTOP) for the block, then let go (SIGCONT) unless it was
    killed meanwhile: a test that inspects a run's state before killing it kills the
    state it inspected, however slow the inspection (a bucket read) is."""
    process.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGCONT)


def stop(process: subprocess.Popen, grace_s: float = 30.0) -> None:
    """SIGTERM, then SIGKILL if it is still running after ``grace_s``."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
