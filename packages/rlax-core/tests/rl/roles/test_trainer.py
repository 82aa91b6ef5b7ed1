"""`rlax train` end to end: the run directory, the metrics, and exact resume after SIGKILL."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from rich.console import Console

from rlax_core.cli import status_cmd
from rlax_core.models.safetensors_file import SafetensorsReader
from rlax_core.run_dir.metrics import read_metrics
from rlax_core.run_dir.status import collect_status
from rlax_core.testing.run_configs import small_run_config

REPO = Path(__file__).resolve().parents[5]
QUICKSTART = REPO / "examples" / "quickstart"

pytestmark = pytest.mark.slow


def _config(tmp_path: Path, *, k: int, steps: int = 6, **changes: object) -> Path:
    config = small_run_config(QUICKSTART, name="t", seed=1)
    config |= {
        "warm_start": {"steps": 3, "examples_per_step": 8},
        "staleness": {"max_staleness": k, "pull_every": 1},
        "trainer": {"total_steps": steps, "learning_rate": 1e-3},
        "eval": {"every_steps": 3, "samples_per_prompt": 2, "ks": [1, 2], "max_prompts": 8},
        "checkpoint": {"every_steps": 2},
    }
    for key, value in changes.items():
        section, field = key.split("__")
        config[section][field] = value
    path = tmp_path / f"run-k{k}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _train(config: Path, run_dir: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "rlax_core.cli", "train", str(config), "--run-dir", str(run_dir),
         "--no-progress", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _finish(process: subprocess.Popen, timeout: float = 900) -> None:
    _out, err = process.communicate(timeout=timeout)
    assert process.returncode == 0, f"exit {process.returncode}\n{err[-4000:]}"


def _kill_after_step(process: subprocess.Popen, run_dir: Path, step: int) -> None:
    """SIGKILLs the run as soon as it has logged ``step`` (so, in the middle of the next)."""
    deadline = time.monotonic() + 900
    metrics = run_dir / "metrics.jsonl"
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"the run ended before step {step}: {process.stderr.read()[-3000:]}")
        if metrics.exists() and any(row["step"] >= step for row in read_metrics(run_dir)):
            os.kill(process.pid, signal.SIGKILL)
            process.wait()
            return
        time.sleep(0.05)
    pytest.fail("the run never reached the step to kill it at")


def _final_params(run_dir: Path) -> dict[str, np.ndarray]:
    with SafetensorsReader(run_dir / "final" / "model.safetensors") as reader:
        return {name: np.array(reader.array(name)) for name in reader.entries}


def _trained_ids(run_dir: Path, step: int) -> list[str]:
    meta = run_dir / "checkpoints" / str(step) / "meta" / "metadata"  # Orbax's JSON item
    return json.loads(meta.read_text())["controller"]["trained_ids"]


PAGED = {"kind": "paged", "slots": 6, "block_size": 4, "prefill_chunk": 16,
         "max_prompt_tokens": 64}  # fmt: skip


def test_a_run_leaves_a_complete_run_directory(tmp_path: Path) -> None:
    """With the streaming worker and its engine (the batch worker: the tests below)."""
    run_dir = tmp_path / "run"
    _finish(_train(_config(tmp_path, k=1, rollout__engine=PAGED), run_dir))
    assert (run_dir / "config.yaml").exists()
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["staleness"]["max_staleness"] == 1
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir() if p.name.isdigit()) == [
        "4",
        "6",
    ]
    assert list((run_dir / "tensorboard").glob("events.out.tfevents.*"))
    assert (run_dir / "final" / "config.json").exists() and (
        run_dir / "final" / "tokenizer.json"
    ).exists()
    rows = read_metrics(run_dir)
    assert [r["step"] for r in rows] == list(range(7))
    assert "eval/pass@1" in rows[0] and "eval/pass@2" in rows[0]  # the first evaluation: RL step 0
    for row in rows[1:]:
        for key in ("policy_version", "reward/mean", "staleness/max", "staleness/dropped",
                    "logprob_gap/max", "throughput/samples_per_s", "time/step_s", "loss/total",
                    "clip/fraction", "entropy/mean", "grad_norm", "is_weight/mean"):  # fmt: skip
            assert key in row, key
        assert row["staleness/max"] <= 1
        assert row["logprob_gap/max"] < 1e-5
    assert [r["step"] for r in rows if "eval/pass@1" in r] == [0, 3, 6]
    engine = [r for r in rows if "rollout_engine/slot_occupancy" in r]
    assert engine and all(r["rollout_engine/kv_blocks"] > 0 for r in engine)
    worker = json.loads((run_dir / "status" / "worker-0.json").read_text())
    assert worker["engine"]["slot_occupancy"] > 0 and worker["throughput"]["useful_tokens_per_s"]
    console = Console(width=300, record=True)
    console.print(status_cmd.render(collect_status(run_dir)[0]))
    shown = next(line for line in console.export_text().splitlines() if "worker-0" in line)
    assert re.search(r"slots \d/6 \(\d+% busy\), \d+ tokens, KV \d+/\d+, \d+ preempted", shown)
    plot = subprocess.run(
        [sys.executable, "-m", "rlax_core.cli", "plot", str(run_dir)],
        capture_output=True,
        text=True,
    )
    assert plot.returncode == 0, plot.stderr
    assert (run_dir / "plots" / "reward.png").stat().st_size > 10_000


def test_sigkill_and_resume_equal_an_uninterrupted_run(tmp_path: Path) -> None:
    """k = 0, one streaming worker: the resumed run's parameters equal the uninterrupted
    run's (its completions depend only on weights, prompt and seed)."""
    config = _config(tmp_path, k=0, rollout__engine=PAGED)
    _finish(_train(config, tmp_path / "straight"))
    killed = tmp_path / "killed"
    _kill_after_step(_train(config, killed), killed, step=3)  # checkpoint at 2, killed in 4
    _finish(_train(config, killed, "--resume"))
    straight, resumed = _final_params(tmp_path / "straight"), _final_params(killed)
    assert straight.keys() == resumed.keys()
    for name in straight:
        np.testing.assert_allclose(resumed[name], straight[name], rtol=0, atol=1e-6, err_msg=name)
    rows = read_metrics(killed)
    assert [r["step"] for r in rows] == list(range(7))  # every step once, none lost
    assert _trained_ids(killed, 6) == _trained_ids(tmp_path / "straight", 6)


def test_remat_generates_trains_and_resumes(tmp_path: Path) -> None:
    """model.remat: the sampler's decode never traces remat; training, parity, resume hold.

    No warm start and ``checkpoint.at_start`` off: no checkpoint at step 0. Saves are
    asynchronous; the loop reports how long each held it up.
    """
    config = _config(tmp_path, k=0, steps=4, model__remat=True, warm_start__steps=0)
    straight = tmp_path / "straight"
    _finish(_train(config, straight))
    saved = sorted(int(p.name) for p in (straight / "checkpoints").iterdir() if p.name.isdigit())
    assert saved == [2, 4]  # none at step 0
    rows = read_metrics(straight)
    assert [r["step"] for r in rows] == list(range(5))
    for row in rows[1:]:
        assert row["logprob_gap/max"] < 1e-5  # the sampler and the rematerialised trainer agree
        assert row["time/checkpoint_wait_s"] >= 0
    killed = tmp_path / "killed"
    _kill_after_step(_train(config, killed), killed, step=3)
    _finish(_train(config, killed, "--resume"))
    expected, resumed = _final_params(straight), _final_params(killed)
    for name in expected:
        np.testing.assert_allclose(resumed[name], expected[name], rtol=0, atol=1e-6, err_msg=name)
    assert [r["step"] for r in read_metrics(killed)] == list(range(5))


def test_memory_stays_flat_across_steps(tmp_path: Path) -> None:
    """A leak shows as growth from step to step: arrays and resident memory at step 20
    are within 5% of step 3 (compilations and allocator warm-up are over by then)."""
    config = _config(tmp_path, k=1, steps=20, warm_start__steps=0, eval__every_steps=0,
                     checkpoint__every_steps=5)  # fmt: skip
    run_dir = tmp_path / "run"
    _finish(_train(config, run_dir))
    rows = {r["step"]: r for r in read_metrics(run_dir)}
    for key in ("memory/arrays_gib", "memory/rss_gib"):
        # Around a checkpoint or a version change a second copy is briefly alive: a leak
        # is growth in the least of three steps, not one step's high.
        early = max(rows[s][key] for s in (3, 4, 5))
        late = min(rows[s][key] for s in (18, 19, 20))
        assert late <= 1.05 * early, f"{key} grew from {early:.4f} to {late:.4f} GiB"
    waits = [rows[s]["time/checkpoint_wait_s"] for s in range(1, 21)]
    assert all(w >= 0 for w in waits)


def test_resuming_a_run_without_a_checkpoint_starts_it_over(tmp_path: Path) -> None:
    """No checkpoint at step 0 and none due yet: a resumed run starts over, its metrics
    from the first attempt dropped, and trains every step once."""
    config = _config(tmp_path, k=0, steps=3, warm_start__steps=0, checkpoint__every_steps=100)
    run_dir = tmp_path / "run"
    _kill_after_step(_train(config, run_dir), run_dir, step=1)
    assert not [p for p in (run_dir / "checkpoints").iterdir() if p.name.isdigit()]
    _finish(_train(config, run_dir, "--resume"))
    assert [r["step"] for r in read_metrics(run_dir)] == [0, 1, 2, 3]
    trained = _trained_ids(run_dir, 3)
    assert len(trained) == len(set(trained)) == 3 * 4


def test_sigkill_and_resume_keep_the_accounting_when_asynchronous(tmp_path: Path) -> None:
    """k = 2: no step lost, no rollout trained twice, staleness never above k."""
    config = _config(tmp_path, k=2, steps=8)
    run_dir = tmp_path / "run"
    _kill_after_step(_train(config, run_dir), run_dir, step=5)
    _finish(_train(config, run_dir, "--resume"))
    rows = read_metrics(run_dir)
    assert [r["step"] for r in rows] == list(range(9))
    assert max(r["staleness/max"] for r in rows[1:]) <= 2
    trained = _trained_ids(run_dir, 8)
    assert len(trained) == len(set(trained)) == 8 * 4
    assert rows[-1]["groups/trained"] == 8 * 4


def test_resuming_needs_the_flag_and_the_same_config(tmp_path: Path) -> None:
    config = _config(tmp_path, k=0, steps=2)
    run_dir = tmp_path / "run"
    _finish(_train(config, run_dir))
    again = _train(config, run_dir)
    _, err = again.communicate(timeout=600)
    assert again.returncode == 2 and "pass --resume" in err
    finished = _train(config, run_dir, "--resume")
    _, err = finished.communicate(timeout=600)
    assert finished.returncode == 0 and "finished at step 2; nothing to resume" in err, err[-3000:]
    nothing = _train(config, tmp_path / "never-started", "--resume")
    _, err = nothing.communicate(timeout=600)
    assert nothing.returncode == 2 and "holds no run to resume" in err
    assert "Traceback" not in err
    changed = _config(tmp_path, k=0, steps=2, rollout__max_new_tokens=6)
    resumed = _train(changed, run_dir, "--resume")
    _, err = resumed.communicate(timeout=600)
    assert resumed.returncode == 2 and "rollout.max_new_tokens" in err


def test_the_verifier_stage_trains_what_inline_judging_trains(tmp_path: Path) -> None:
    """k = 0: judging in verifier threads instead of the worker changes nothing trained."""
    runs = {}
    for placement in ("inline", "stage"):
        folder = tmp_path / placement
        folder.mkdir()
        config = _config(folder, k=0, steps=4, verifier__placement=placement,
                         verifier__workers=2)  # fmt: skip
        _finish(_train(config, folder / "run"))
        runs[placement] = folder / "run"
    inline, staged = _final_params(runs["inline"]), _final_params(runs["stage"])
    for name in inline:
        np.testing.assert_allclose(staged[name], inline[name], rtol=0, atol=1e-6, err_msg=name)
    assert _trained_ids(runs["stage"], 4) == _trained_ids(runs["inline"], 4)
    rows = read_metrics(runs["stage"])
    assert [r["step"] for r in rows] == list(range(5))
    assert all("groups/awaiting_verification" in r for r in rows[1:])
    assert [r["reward/mean"] for r in rows[1:]] == [
        r["reward/mean"] for r in read_metrics(runs["inline"])[1:]
    ]
