"""A worker told to stop while it starts leaves at once.

Until it leases its first prompt group a worker holds nothing, so SIGTERM during its
start-up (imports, model, connecting to the transport: seconds to tens of seconds on a
busy host) ends it at once instead of after the start-up. Here the transport never
answers, so without that the worker would keep trying to connect for
``connect_timeout_s`` (300 s).
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from rlax_core.testing.run_configs import small_run_config

REPO = Path(__file__).resolve().parents[1]
EXIT_WITHIN_S = 30  # a bound on a hang far below connect_timeout_s, not a performance figure

pytestmark = [pytest.mark.network, pytest.mark.distributed]


def test_sigterm_during_start_up_ends_a_worker_at_once(tmp_path: Path) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = small_run_config(REPO / "examples" / "quickstart", name="stop-early", seed=1)
    config["transport"] = {"type": "grpc", "address": f"127.0.0.1:{port}",
                           "connect_timeout_s": 300}  # fmt: skip
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    worker = subprocess.Popen(
        [sys.executable, "-m", "rlax_core.cli", "train", str(path), "--run-dir",
         str(tmp_path / "run"), "--role", "worker", "--worker-id", "w0"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        line = worker.stderr.readline()  # written once its signal handlers are in place
        assert "starting worker w0" in line, line
        time.sleep(1.0)  # into the start-up: connecting
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=EXIT_WITHIN_S)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    err = worker.stderr.read()
    assert worker.returncode == 128 + signal.SIGTERM, err[-3000:]
    assert "stopped by SIGTERM while starting" in err
