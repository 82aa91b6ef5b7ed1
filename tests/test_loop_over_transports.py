"""The RL loop over the networked transports: only ``transport.type`` changes.

Each run is three real processes, as the launchers start them: the transport server
(``rlax serve param-server``), the trainer (``rlax train --role trainer``) and one
inference worker (``rlax train --role worker``); with the verifier stage, a fourth, a
verifier (``rlax train --role verifier``). The same short config also runs in one
process with the transport's clients in threads (``rlax train``).
"""

from __future__ import annotations

import signal
import socket
import subprocess
from pathlib import Path

import pytest
import yaml

from rlax_core.run_dir.metrics import read_metrics
from rlax_core.testing.processes import rlax, serve, stop
from rlax_core.testing.run_configs import small_run_config

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "examples" / "quickstart"
STEPS = 4

pytestmark = [pytest.mark.slow, pytest.mark.network, pytest.mark.distributed]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _transport(kind: str, tmp_path: Path) -> dict:
    port = _free_port()
    if kind == "nats":
        return {"type": "nats", "servers": [f"nats://127.0.0.1:{port}"],
                "server": {"store_dir": str(tmp_path / "nats-store")}}  # fmt: skip
    return {"type": "grpc", "address": f"127.0.0.1:{port}",
            "server": {"state_dir": str(tmp_path / "grpc-state")}}  # fmt: skip


def _config(tmp_path: Path, kind: str, placement: str = "inline") -> Path:
    config = small_run_config(QUICKSTART, name=f"over-{kind}", seed=3)
    config["verifier"]["placement"] = placement
    config["rollout"]["lease_s"] = 60
    config.update(
        staleness={"max_staleness": 1},
        trainer={"total_steps": STEPS, "learning_rate": 1e-3},
        eval={"every_steps": 0, "samples_per_prompt": 2, "ks": [1, 2], "max_prompts": 8},
        checkpoint={"every_steps": 2},
        transport=_transport(kind, tmp_path),
    )
    path = tmp_path / f"{kind}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _finished(process: subprocess.Popen, timeout: float = 900) -> None:
    _, err = process.communicate(timeout=timeout)
    assert process.returncode == 0, f"exit {process.returncode}:\n{err[-4000:]}"


def _check(run_dir: Path) -> None:
    rows = read_metrics(run_dir)
    assert [r["step"] for r in rows] == list(range(STEPS + 1))
    assert all(r["staleness/max"] <= 1 for r in rows[1:])
    assert rows[-1]["groups/trained"] == STEPS * 4
    assert (run_dir / "final" / "model.safetensors").exists()


@pytest.mark.parametrize("kind", ["nats", "grpc"])
def test_trainer_and_worker_processes_over_the_transport(tmp_path: Path, kind: str) -> None:
    config = _config(tmp_path, kind)
    server = serve(config)
    run_dir = tmp_path / "run"
    worker = rlax("train", config, "--run-dir", run_dir, "--role", "worker", "--worker-id", "w0")
    try:
        trainer = rlax("train", config, "--run-dir", run_dir, "--role", "trainer", "--no-progress")
        _finished(trainer)
        _check(run_dir)
        # A worker is stopped the way a scheduler reclaims it: SIGTERM, and it exits cleanly.
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) in (0, 128 + signal.SIGTERM), worker.stderr.read()[-3000:]
    finally:
        stop(worker)
        stop(server)


@pytest.mark.parametrize("kind", ["nats", "grpc"])
def test_trainer_worker_and_verifier_processes_over_the_transport(
    tmp_path: Path, kind: str
) -> None:
    config = _config(tmp_path, kind, placement="stage")
    server = serve(config)
    run_dir = tmp_path / "run"
    worker = rlax("train", config, "--run-dir", run_dir, "--role", "worker", "--worker-id", "w0")
    verifier = rlax("train", config, "--run-dir", run_dir, "--role", "verifier",
                    "--verifier-id", "v0")  # fmt: skip
    try:
        trainer = rlax("train", config, "--run-dir", run_dir, "--role", "trainer", "--no-progress")
        _finished(trainer)
        _check(run_dir)
        rows = read_metrics(run_dir)
        assert all(r["rollouts/unjudged"] == 0 for r in rows[1:])  # every completion judged
        for process in (worker, verifier):
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=60) in (0, 128 + signal.SIGTERM), process.stderr.read()[
                -3000:
            ]
    finally:
        stop(worker)
        stop(verifier)
        stop(server)


@pytest.mark.parametrize("kind", ["nats", "grpc"])
def test_the_embedded_run_over_the_transport(tmp_path: Path, kind: str) -> None:
    config = _config(tmp_path, kind)
    server = serve(config)
    try:
        _finished(rlax("train", config, "--run-dir", tmp_path / "run", "--no-progress"))
        _check(tmp_path / "run")
    finally:
        stop(server)
