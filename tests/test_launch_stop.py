"""Stopping ``rlax launch`` stops everything it started, and nothing else.

A real local launch (the chaos config over NATS: the nats-server, the trainer, 3 worker
and 2 verifier processes) is sent SIGTERM, as a scheduler or Ctrl-C would, once every process
runs. It must exit with 128 + SIGTERM, leave no process of any of its process groups
alive (workers still starting included), and leave alone a process it did not start.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlax_core.run_dir.process_table import pid_alive, read_table
from rlax_launchers.testing.chaos import launch, launch_log
from rlax_launchers.testing.chaos_config import VERIFIERS, WORKERS, chaos_run_config

REPO = Path(__file__).resolve().parents[1]
# Bounds on a hang, not performance figures: start-up on a busy 2-core host, and the
# launcher's stop_grace_s (10 s) plus the SIGKILL that follows it.
START_TIMEOUT_S = 180
STOP_TIMEOUT_S = 60
PROCESSES = 2 + WORKERS + VERIFIERS  # the transport server, the trainer, workers, verifiers

pytestmark = [pytest.mark.slow, pytest.mark.network, pytest.mark.distributed]


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _all_running(run_dir: Path) -> bool:
    if not (run_dir / "launcher.json").exists():
        return False
    table = read_table(run_dir)
    return len(table.processes) == PROCESSES and all(
        p.state == "running" and pid_alive(p.pid) for p in table.processes
    )


def test_sigterm_to_the_launcher_stops_its_processes_and_nothing_else(tmp_path: Path) -> None:
    config = chaos_run_config(REPO / "examples" / "quickstart.yaml", tmp_path, "nats",
                              total_steps=10_000)  # fmt: skip
    run_dir = tmp_path / "run"
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    launcher = launch(config, run_dir)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _all_running(run_dir):
            if launcher.poll() is not None or time.monotonic() > deadline:
                pytest.fail(
                    f"the launch did not get all {PROCESSES} processes running: "
                    f"{launch_log(run_dir)}"
                )
            time.sleep(0.2)
        started = read_table(run_dir).processes
        launcher.send_signal(signal.SIGTERM)
        code = launcher.wait(timeout=STOP_TIMEOUT_S)
        assert code == 128 + signal.SIGTERM, launch_log(run_dir)
        assert "stopped by SIGTERM" in launch_log(run_dir)
        for process in started:
            assert not pid_alive(process.pid), process.name
            assert not _group_alive(process.pgid), f"{process.name}'s group outlived the launch"
        assert all(p.state == "stopped" for p in read_table(run_dir).processes)
        assert bystander.poll() is None  # not started by the launch: untouched
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
        bystander.kill()
        bystander.wait()
