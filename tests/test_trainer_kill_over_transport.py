"""A trainer SIGKILLed in the middle of a run over gRPC, then started again, finishes.

The killed trainer held rollouts under leases (trained but not yet checkpointed, or
waiting for the next batch), and had issued prompt groups after its last checkpoint.
Its successor resumes from that checkpoint at a newer policy version and issues groups
under ids the dead trainer never used (the ids carry the issuing version): reusing the
dead trainer's ids hung the run, since the prompt queue drops such puts as duplicates
while the rollouts under them are stale or gone. The trainer's leases last
``rollout.lease_s`` (here 4 s) and are renewed while it runs, so what the dead trainer
held comes back within seconds, where leases of an hour (as before) stalled the run.

gRPC is the transport that shows it: its server holds a lease until it expires, whereas
the NATS client's keep-alives stop with the process.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from rlax_core.run_dir.metrics import read_metrics
from rlax_core.testing.processes import rlax, serve, stop
from rlax_core.testing.run_configs import small_run_config

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "examples" / "quickstart"
STEPS = 8
PROMPTS_PER_STEP = 4
# Far above the restarted trainer's own start-up and the 4 s lease, far below an hour.
FINISH_TIMEOUT_S = 300

pytestmark = [pytest.mark.slow, pytest.mark.network, pytest.mark.distributed]


def _config(tmp_path: Path) -> Path:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = small_run_config(QUICKSTART, name="trainer-kill", seed=5, evaluate=False)
    config["rollout"]["lease_s"] = 4
    config |= {
        "staleness": {"max_staleness": 0},
        "trainer": {"total_steps": STEPS, "learning_rate": 1e-3},
        "checkpoint": {"every_steps": 2},
        "transport": {
            "type": "grpc",
            "address": f"127.0.0.1:{port}",
            "server": {"state_dir": str(tmp_path / "grpc-state")},
        },
    }
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _kill_after_step(process: subprocess.Popen, run_dir: Path, step: int, committed: int) -> None:
    """SIGKILLs the trainer once it has logged ``step`` and committed checkpoint ``committed``
    (checkpoints are written in the background: the kill must come after it)."""
    deadline = time.monotonic() + 600
    checkpoint = run_dir / "checkpoints" / str(committed)  # Orbax renames it when complete
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"the trainer ended before step {step}: {process.stderr.read()[-3000:]}")
        if (
            (run_dir / "metrics.jsonl").exists()
            and checkpoint.is_dir()
            and any(row["step"] >= step for row in read_metrics(run_dir))
        ):
            os.kill(process.pid, signal.SIGKILL)
            process.wait()
            return
        time.sleep(0.02)
    pytest.fail(f"the trainer never reached step {step}")


def test_a_killed_trainer_gets_its_leased_rollouts_back_within_the_lease(tmp_path: Path) -> None:
    config = _config(tmp_path)
    run_dir = tmp_path / "run"
    server = serve(config)
    worker = rlax("train", config, "--run-dir", run_dir, "--role", "worker", "--worker-id", "w0")
    trainer_args = ("train", config, "--run-dir", run_dir, "--role", "trainer", "--no-progress")
    try:
        _kill_after_step(rlax(*trainer_args), run_dir, 3, committed=2)  # step 3 is held
        restarted = rlax(*trainer_args)  # no --resume: a trainer role resumes by itself
        try:
            _, err = restarted.communicate(timeout=FINISH_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            restarted.kill()
            pytest.fail(f"the restarted trainer did not finish in {FINISH_TIMEOUT_S} s")
        assert restarted.returncode == 0, err[-4000:]
    finally:
        stop(worker)
        stop(server)
    rows = read_metrics(run_dir)
    assert [r["step"] for r in rows] == list(range(STEPS + 1))
    assert rows[-1]["groups/trained"] == STEPS * PROMPTS_PER_STEP
    assert all(r["staleness/max"] == 0 for r in rows[1:])
    meta = run_dir / "checkpoints" / str(STEPS) / "meta" / "metadata"
    trained = json.loads(meta.read_text())["controller"]["trained_ids"]
    assert len(trained) == len(set(trained)) == STEPS * PROMPTS_PER_STEP
