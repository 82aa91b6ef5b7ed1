"""The multi-host trainer: two ``jax.distributed`` processes train what one process trains.

Every run here is real processes over the gRPC transport, as a launcher starts them: the
parameter server (``rlax serve param-server``), one inference worker, and the trainer —
either one process with four CPU devices, or two processes with two devices each (gloo
collectives), on the same 1 × 2 × 2 (data × fsdp × tensor) mesh. The fsdp axis spans the
two processes, so each holds half of every parameter and of every batch: the gradients
and the optimizer state are only right if the processes reduce across each other.

The runs are deterministic (staleness 0, one worker, sampling seeded per group id), so
both train on the same rollouts and must end with the same parameters.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from rlax_core.cli.train_cmd import PEER_STOPPED
from rlax_core.models.safetensors_file import SafetensorsReader
from rlax_core.run_dir.metrics import read_metrics
from rlax_core.testing.processes import rlax, serve, stop
from rlax_core.testing.run_configs import small_run_config

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "examples" / "quickstart"
STEPS = 3
# fp32 on the same mesh: only the order of the cross-process reductions may differ.
ATOL = 1e-5

pytestmark = [pytest.mark.slow, pytest.mark.network, pytest.mark.distributed]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _config(tmp_path: Path, name: str, *, evaluate: bool = True) -> Path:
    config = small_run_config(QUICKSTART, name=name, seed=5, evaluate=evaluate, num_kv_heads=2)
    config["rollout"]["lease_s"] = 60
    config |= {
        "staleness": {"max_staleness": 0, "pull_every": 1},
        # The untrained model earns no reward, so the advantages are zero: the entropy
        # bonus and the KL penalty (to a reference on the mesh) give the gradients.
        "algorithm": {"entropy_coef": 0.05, "kl_coef": 0.05},
        "trainer": {
            "total_steps": STEPS,
            "learning_rate": 3e-3,
            "minibatches_per_step": 2,
            "mesh": {"data": 1, "fsdp": 2, "tensor": 2},
        },
        "eval": {"every_steps": 0, "samples_per_prompt": 1, "ks": [1], "max_prompts": 2},
        "checkpoint": {"every_steps": 1, "keep": 10},
        "transport": {
            "type": "grpc",
            "address": f"127.0.0.1:{_free_port()}",
            "server": {"state_dir": str(tmp_path / f"{name}-grpc-state")},
        },
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _rlax(*args: str | Path, devices: int = 1) -> subprocess.Popen:
    return rlax(
        *args, env={**os.environ, "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}"}
    )


def _trainers(config: Path, run_dir: Path, *extra: str) -> list[subprocess.Popen]:
    """The two processes of a multi-host trainer (two CPU devices each)."""
    coordinator = f"127.0.0.1:{_free_port()}"
    distributed = ("--coordinator", coordinator, "--num-processes", "2")
    return [
        _rlax("train", config, "--run-dir", run_dir, "--role", "trainer", "--no-progress",
              *distributed, "--process-id", str(i), *extra, devices=2)
        for i in range(2)
    ]  # fmt: skip


def _exit_code(process: subprocess.Popen, timeout: float = 300) -> tuple[int, str]:
    try:
        _, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        _, err = process.communicate()
        pytest.fail(f"a trainer process did not exit within {timeout:.0f} s:\n{err[-3000:]}")
    return process.returncode, err


def _finished(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        code, err = _exit_code(process)
        assert code == 0, f"exit {code}:\n{_tail(err)}"


def _tail(err: str) -> str:
    """The end of a process's stderr, without the array dumps of a failed check."""
    lines = [line for line in err.splitlines() if not line.startswith((" ", "\t"))]
    return "\n".join(lines)[-4000:]


def _final_params(run_dir: Path) -> dict[str, np.ndarray]:
    with SafetensorsReader(run_dir / "final" / "model.safetensors") as reader:
        return {name: np.array(reader.array(name)) for name in reader.entries}


def _initial_params(config: Path) -> dict[str, np.ndarray]:
    """The parameters the run starts from (the preset initialised with the run's seed)."""
    from rlax_core.config.loading import load_run_config
    from rlax_core.models.params import flat_params
    from rlax_core.rl.roles.components import build_model

    model = build_model(load_run_config(config), config.parent)
    return {name: np.asarray(value) for name, value in flat_params(model).items()}


def _trained_ids(run_dir: Path, step: int) -> list[str]:
    meta = run_dir / "checkpoints" / str(step) / "meta" / "metadata"  # Orbax's JSON item
    return json.loads(meta.read_text())["controller"]["trained_ids"]


def _wait_for_step(processes: list[subprocess.Popen], run_dir: Path, step: int) -> None:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        for process in processes:
            if process.poll() is not None:
                pytest.fail(f"a trainer process ended early:\n{_tail(process.stderr.read())}")
        if (run_dir / "metrics.jsonl").exists() and any(
            row["step"] >= step for row in read_metrics(run_dir)
        ):
            return
        time.sleep(0.1)
    pytest.fail(f"the trainer never reached step {step}")


def _run(config: Path, run_dir: Path, *, processes: int) -> None:
    """One whole run: its own parameter server, one worker, and the trainer."""
    server = serve(config)
    worker = _rlax("train", config, "--run-dir", run_dir, "--role", "worker", "--worker-id", "w0")
    try:
        if processes == 1:
            trainer = [_rlax("train", config, "--run-dir", run_dir, "--role", "trainer",
                             "--no-progress", devices=4)]  # fmt: skip
        else:
            trainer = _trainers(config, run_dir)
        _finished(trainer)
    finally:
        stop(worker)
        stop(server)


def test_two_trainer_processes_train_what_one_process_trains(tmp_path: Path) -> None:
    single, multi = tmp_path / "single", tmp_path / "multi"
    config = _config(tmp_path, "single")
    _run(config, single, processes=1)
    _run(_config(tmp_path, "multi"), multi, processes=2)

    assert _trained_ids(multi, STEPS) == _trained_ids(single, STEPS)  # the same rollouts
    expected, actual = _final_params(single), _final_params(multi)
    assert actual.keys() == expected.keys()
    initial = _initial_params(config)
    moved = max(float(np.abs(expected[n] - initial[n]).max()) for n in expected)
    assert moved > 100 * ATOL  # training changed the weights far beyond the tolerance
    for name in expected:
        np.testing.assert_allclose(actual[name], expected[name], rtol=0, atol=ATOL, err_msg=name)
    rows = read_metrics(multi)  # written once, by the leader
    assert [r["step"] for r in rows] == list(range(STEPS + 1))
    assert all(r["staleness/max"] == 0 for r in rows[1:])
    assert [p.name for p in (multi / "status").glob("trainer*.json")] == ["trainer.json"]


def test_a_stop_asked_of_one_process_stops_both_and_they_resume(tmp_path: Path) -> None:
    """SIGTERM to the non-leader only: both checkpoint and stop; restarted, they resume."""
    config, run_dir = _config(tmp_path, "stop", evaluate=False), tmp_path / "stop"
    server = serve(config)
    worker = _rlax("train", config, "--run-dir", run_dir, "--role", "worker", "--worker-id", "w0")
    try:
        trainers = _trainers(config, run_dir)
        _wait_for_step(trainers, run_dir, 1)
        trainers[1].send_signal(signal.SIGTERM)
        # The leader stops too, as asked by its peer, with the code that asks a supervisor
        # to restart it (systemd counts 143, a requested stop, as success).
        for process, expected in zip(trainers, (PEER_STOPPED, 128 + signal.SIGTERM), strict=True):
            code, err = _exit_code(process, timeout=120)
            assert code == expected, f"exit {code}:\n{_tail(err)}"
        stopped_at = read_metrics(run_dir)[-1]["step"]
        assert 1 <= stopped_at < STEPS
        assert str(stopped_at) in {p.name for p in (run_dir / "checkpoints").iterdir()}

        _finished(_trainers(config, run_dir, "--resume"))
    finally:
        stop(worker)
        stop(server)
    rows = read_metrics(run_dir)
    assert [r["step"] for r in rows] == list(range(STEPS + 1))  # every step once, none lost
    trained = _trained_ids(run_dir, STEPS)
    assert len(trained) == len(set(trained)) == STEPS * 4
    assert (run_dir / "final" / "model.safetensors").exists()
