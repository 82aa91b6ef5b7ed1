"""Run files in buckets: each kind of file a run reads or writes, against real emulators.

fake-gcs-server stands in for Cloud Storage (Orbax writes there through TensorStore's
GCS driver, everything else through gcsfs) and moto's S3 server for S3 (s3fs; Orbax
checkpoints staged locally and uploaded with a commit object).
"""

from __future__ import annotations

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlax_core.data.rows import read_rows
from rlax_core.errors import ConfigError
from rlax_core.models import init_model, load_pretrained, save_pretrained
from rlax_core.models.params import flat_params
from rlax_core.models.qwen import QwenConfig
from rlax_core.models.safetensors_file import CheckpointError
from rlax_core.models.tokenizer import Tokenizer
from rlax_core.run_dir.checkpoints import COMMITTED, CheckpointStore
from rlax_core.run_dir.metrics import MetricsLog, read_metrics
from rlax_core.run_dir.status import read_statuses, write_status
from rlax_core.storage import filesystem, storage_path
from rlax_core.testing.object_stores import ObjectStore, start_fake_gcs, start_moto_s3

pytestmark = pytest.mark.network
QUICKSTART = Path(__file__).resolve().parents[3] / "examples" / "quickstart"


@pytest.fixture(scope="module", params=["gs", "s3"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    if request.param == "gs":
        started = start_fake_gcs(tmp_path_factory.mktemp("fake-gcs"))
    else:
        started = start_moto_s3()
    yield started
    started.stop()


@pytest.fixture
def store(server: ObjectStore, monkeypatch: pytest.MonkeyPatch) -> ObjectStore:
    for key, value in server.env.items():
        monkeypatch.setenv(key, value)
    server.apply()
    return server


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLAX_CACHE_DIR", str(tmp_path / "cache"))


def _tiny() -> QwenConfig:
    return QwenConfig.tiny(num_layers=1)


def test_a_checkpoint_in_a_bucket_loads_tensor_by_tensor(store: ObjectStore) -> None:
    model = init_model(_tiny(), seed=3)
    url = store.url("models", "tiny")
    save_pretrained(model, url, max_shard_bytes=4096)  # several shards and an index
    names = filesystem(storage_path(url)).ls(url.split("://")[1])
    assert any(n.endswith("model.safetensors.index.json") for n in names)
    loaded = load_pretrained(url)
    for name, array in flat_params(model).items():
        np.testing.assert_array_equal(np.asarray(flat_params(loaded)[name]), np.asarray(array))


def test_a_truncated_checkpoint_in_a_bucket_is_refused(store: ObjectStore) -> None:
    url = store.url("models", "truncated")
    save_pretrained(init_model(_tiny(), seed=3), url)
    path = storage_path(url) / "model.safetensors"
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(CheckpointError, match="truncated"):
        load_pretrained(url)


def test_tokenizer_and_datasets_read_from_a_bucket(store: ObjectStore, tmp_path: Path) -> None:
    tokenizer_url = store.url("tokenizer")
    for file in (QUICKSTART / "tokenizer").iterdir():
        (storage_path(tokenizer_url) / file.name).write_bytes(file.read_bytes())
    local = Tokenizer.from_dir(QUICKSTART / "tokenizer")
    remote = Tokenizer.from_dir(tokenizer_url)
    assert remote.encode("4731>") == local.encode("4731>")
    assert remote.eos_token_id == local.eos_token_id

    jsonl = storage_path(store.url("data", "rows.jsonl"))
    jsonl.write_text('{"q": "1"}\n\n{"q": "2"}\n{"q": 3}\nnot json\n')
    rows = read_rows(jsonl, "auto", limit=3)  # stops before the bad line
    assert [r.fields["q"] for r in rows] == ["1", "2", 3]
    with pytest.raises(ConfigError, match="line 5: not valid JSON"):
        read_rows(jsonl, "auto")

    import pyarrow as pa
    import pyarrow.parquet as pq

    local_parquet = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"q": ["a", "b"]}), local_parquet)
    parquet = storage_path(store.url("data", "rows.parquet"))
    parquet.write_bytes(local_parquet.read_bytes())
    assert [r.fields["q"] for r in read_rows(parquet, "auto")] == ["a", "b"]
    with pytest.raises(ConfigError, match="no such file"):
        read_rows(storage_path(store.url("data", "missing.jsonl")), "auto")


def _state(value: float) -> dict:
    return {"w": jnp.full((4, 3), value), "b": jnp.arange(5.0) + value}


def _like(state: dict) -> dict:
    return jax.tree.map(jnp.zeros_like, state)


def test_checkpoints_commit_in_a_bucket_and_resume(store: ObjectStore) -> None:
    url = store.url("runs", "ckpt", "checkpoints")
    checkpoints = CheckpointStore(url, keep=2)
    for step in (1, 2, 3):
        checkpoints.save(step, _state(float(step)), {"step": step})
        checkpoints.ready()
    checkpoints.close()
    again = CheckpointStore(url, keep=2)
    assert again.latest_step() == 3
    state, meta = again.restore(_like(_state(0.0)))
    assert meta == {"step": 3}
    np.testing.assert_array_equal(np.asarray(state["b"]), np.arange(5.0) + 3)
    again.close()
    steps = {p.name for p in storage_path(url).iterdir()}
    assert {"2", "3"} <= steps and "1" not in steps  # keep=2 holds in the bucket too


def test_a_step_without_its_commit_is_never_resumed_from(store: ObjectStore) -> None:
    url = store.url("runs", "torn", "checkpoints")
    checkpoints = CheckpointStore(url, keep=3)
    for step in (1, 2):
        checkpoints.save(step, _state(float(step)), {"step": step})
    checkpoints.close()
    # A crash in the middle of writing step 2: its commit record never reached the bucket.
    marker = "commit_success.txt" if store.scheme == "gs" else COMMITTED
    (storage_path(url) / "2" / marker).unlink()
    again = CheckpointStore(url, keep=3)
    assert again.latest_step() == 1
    _, meta = again.restore(_like(_state(0.0)))
    assert meta == {"step": 1}
    again.close()


def test_metrics_and_status_in_a_bucket(store: ObjectStore) -> None:
    run_dir = storage_path(store.url("runs", "metrics"))
    with MetricsLog(run_dir) as log:
        for step in range(4):
            log.write(step, {"loss": 1.0 / (step + 1)})
        log.sync()
        assert [r["step"] for r in read_metrics(run_dir)] == [0, 1, 2, 3]
    # A resume from the checkpoint of step 1 drops what was logged after it, in the bucket.
    with MetricsLog(run_dir, resume_from_step=1) as log:
        log.write(2, {"loss": 0.25})
    assert [r["step"] for r in read_metrics(str(run_dir))] == [0, 1, 2]
    events = sorted(p.name for p in (run_dir / "tensorboard").iterdir())
    assert len(events) == 2 and events[0] < events[1]  # the second comes after the first

    write_status(run_dir, "worker-0", {"role": "worker", "policy_version": 7})
    assert read_statuses(run_dir)["worker-0"]["policy_version"] == 7


def test_the_final_export_replaces_what_was_there(store: ObjectStore) -> None:
    url = store.url("runs", "export", "final")
    save_pretrained(init_model(_tiny(), seed=1), url, max_shard_bytes=4096)
    save_pretrained(init_model(_tiny(), seed=2), url)  # one file now: the shards go
    names = sorted(p.name for p in storage_path(url).iterdir())
    assert names == ["config.json", "model.safetensors"]
    assert json.loads((storage_path(url) / "config.json").read_text())["num_hidden_layers"] == 1


def test_paths_that_name_no_store_are_refused() -> None:
    with pytest.raises(ConfigError, match="unknown storage scheme 'hdfs'"):
        storage_path("hdfs://cluster/data.jsonl")
    with pytest.raises(ConfigError, match="names no bucket"):
        storage_path("gs:///data.jsonl")
    assert storage_path("data/x.jsonl", Path("/base")) == Path("/base/data/x.jsonl")
