"""A run whose model, data and run directory are all in a bucket: trained, SIGKILLed,
resumed from the bucket, finished, with the accounting intact.

Against real emulators: fake-gcs-server for ``gs://`` (Orbax writes the checkpoints
there itself, through TensorStore's GCS driver) and moto's S3 server for ``s3://``
(checkpoints staged locally and uploaded with a commit object).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from rlax_core.models import PRESETS, init_model, save_pretrained
from rlax_core.run_dir.checkpoints import COMMITTED
from rlax_core.run_dir.metrics import MetricsFileError, read_metrics
from rlax_core.storage import storage_path
from rlax_core.testing.object_stores import ObjectStore, start_fake_gcs, start_moto_s3
from rlax_core.testing.processes import paused, rlax
from rlax_core.testing.run_configs import small_run_config

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "examples" / "quickstart"
STEPS = 6
PROMPTS_PER_STEP = 4

pytestmark = [pytest.mark.slow, pytest.mark.network]


@pytest.fixture(params=["gs", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    started = start_fake_gcs(tmp_path / "fake-gcs") if request.param == "gs" else start_moto_s3()
    for key, value in started.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("RLAX_CACHE_DIR", str(tmp_path / "cache"))
    started.apply()
    yield started
    started.stop()


def _upload_inputs(store: ObjectStore, config: dict) -> None:
    """The checkpoint (with its tokenizer) and the training data, into the bucket."""
    overrides = config["model"]["overrides"]
    model = init_model(PRESETS["tiny"](**overrides), seed=11)
    model_url = store.url("models", "tiny")
    save_pretrained(model, model_url)
    for file in (QUICKSTART / "tokenizer").iterdir():
        (storage_path(model_url) / file.name).write_bytes(file.read_bytes())
    data_url = store.url("data", "train.jsonl")
    storage_path(data_url).write_bytes((QUICKSTART / "data" / "train.jsonl").read_bytes())
    config["model"] = {"path": model_url}  # its tokenizer too
    config["data"]["train"][0]["path"] = data_url


def _config(store: ObjectStore, tmp_path: Path) -> Path:
    config = small_run_config(QUICKSTART, name="bucket", seed=7, evaluate=False)
    _upload_inputs(store, config)
    config |= {
        "staleness": {"max_staleness": 0},
        "trainer": {"total_steps": STEPS, "learning_rate": 1e-3},
        "checkpoint": {"every_steps": 2},
    }
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _committed(store: ObjectStore, run_dir: str, step: int) -> bool:
    marker = "commit_success.txt" if store.scheme == "gs" else COMMITTED
    return (storage_path(run_dir) / "checkpoints" / str(step) / marker).exists()


def _logged(run_dir: str, step: int) -> bool:
    try:
        return any(row["step"] >= step for row in read_metrics(run_dir))
    except MetricsFileError:
        return False


def _kill_after(process: subprocess.Popen, store: ObjectStore, run_dir: str) -> int:
    """SIGKILLs the run once the bucket holds step 3's metrics and checkpoint 2; the last
    step the process had logged in the bucket."""
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"the run ended before step 3: {process.stderr.read()[-3000:]}")
        with paused(process):  # a bucket read takes a while: the run waits for it
            if _committed(store, run_dir, 2) and _logged(run_dir, 3):
                os.kill(process.pid, signal.SIGKILL)
                process.wait()
                return read_metrics(run_dir)[-1]["step"]
        time.sleep(0.2)
    process.kill()
    pytest.fail("the run never reached step 3 in the bucket")


def test_a_run_in_a_bucket_survives_sigkill(store: ObjectStore, tmp_path: Path) -> None:
    config = _config(store, tmp_path)
    run_dir = store.url("runs", "bucket")
    args = ("train", config, "--run-dir", run_dir, "--no-progress")
    assert _kill_after(rlax(*args), store, run_dir) < STEPS  # killed mid-run
    resumed = rlax(*args, "--resume")
    _, err = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, err[-4000:]

    rows = read_metrics(run_dir)
    assert [r["step"] for r in rows] == list(range(STEPS + 1))  # no step twice, none lost
    assert rows[-1]["groups/trained"] == STEPS * PROMPTS_PER_STEP
    meta = storage_path(run_dir) / "checkpoints" / str(STEPS) / "meta" / "metadata"
    trained = json.loads(meta.read_text())["controller"]["trained_ids"]
    assert len(trained) == len(set(trained)) == STEPS * PROMPTS_PER_STEP
    final = {p.name for p in (storage_path(run_dir) / "final").iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= final
    saved = yaml.safe_load((storage_path(run_dir) / "config.yaml").read_text())
    assert saved["model"]["path"] == store.url("models", "tiny")
    assert (storage_path(run_dir) / "status" / "trainer.json").exists()
