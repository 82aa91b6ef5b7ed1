"""save_pretrained / load_pretrained: round trips, transformers compatibility, clear errors."""

from __future__ import annotations

import filecmp
import json
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

from rlax_core.models import (
    CheckpointError,
    QwenConfig,
    flat_params,
    init_model,
    load_pretrained,
    save_pretrained,
)
from rlax_core.models.safetensors_file import SafetensorsReader, write_safetensors


def _same_files(a: Path, b: Path) -> None:
    names = sorted(p.name for p in a.iterdir())
    assert names == sorted(p.name for p in b.iterdir())
    for name in names:
        assert filecmp.cmp(a / name, b / name, shallow=False), name


@pytest.mark.parametrize("max_shard_bytes", [None, 60_000])
def test_save_load_save_is_byte_identical(
    hf_reference: Path, tmp_path: Path, max_shard_bytes: int | None
) -> None:
    model = load_pretrained(hf_reference / "qwen3_gqa4")
    save_pretrained(model, tmp_path / "a", max_shard_bytes=max_shard_bytes)
    save_pretrained(
        load_pretrained(tmp_path / "a"), tmp_path / "b", max_shard_bytes=max_shard_bytes
    )
    _same_files(tmp_path / "a", tmp_path / "b")
    if max_shard_bytes:
        assert (tmp_path / "a" / "model.safetensors.index.json").exists()


def test_transformers_loads_what_we_save(run_reference, tmp_path: Path) -> None:
    for config in (QwenConfig.tiny("qwen2"), QwenConfig.tiny("qwen3", tie_embeddings=False)):
        model = init_model(config, seed=3)
        out = tmp_path / config.architecture
        save_pretrained(model, out)
        tokens = np.random.default_rng(0).integers(0, config.vocab_size, (2, 9)).astype(np.int32)
        np.save(tmp_path / "tokens.npy", tokens)
        run_reference("logits", out, tmp_path / "tokens.npy", tmp_path / "hf.npy")
        theirs = np.load(tmp_path / "hf.npy")
        ours = np.asarray(model(jnp.asarray(tokens)).logits)
        assert np.abs(ours - theirs).max() <= 1e-4 * np.abs(theirs).max()


def test_saving_over_a_sharded_save_removes_stale_shards(tmp_path: Path) -> None:
    model = init_model(QwenConfig.tiny(), seed=0)
    save_pretrained(model, tmp_path, max_shard_bytes=50_000)
    save_pretrained(model, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "model.safetensors"]
    load_pretrained(tmp_path)


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    path = tmp_path / "ckpt"
    save_pretrained(init_model(QwenConfig.tiny(tie_embeddings=False), seed=0), path)
    return path


def _rewrite(path: Path, keep=lambda name: True, change=None) -> None:
    with SafetensorsReader(path / "model.safetensors") as reader:
        arrays = {n: np.array(reader.array(n)) for n in reader.entries if keep(n)}
    if change:
        arrays = change(arrays)
    write_safetensors(
        path / "model.safetensors",
        [(n, a.shape, a.dtype, lambda a=a: a) for n, a in arrays.items()],
        {"format": "pt"},
    )


def _config(path: Path, **changes: object) -> None:
    config = json.loads((path / "config.json").read_text())
    config.update(changes)
    (path / "config.json").write_text(json.dumps(config))


def _expect(path: Path, *fragments: str) -> None:
    with pytest.raises(CheckpointError) as raised:
        load_pretrained(path)
    for fragment in fragments:
        assert fragment in str(raised.value), str(raised.value)


def test_missing_directory_and_config(tmp_path: Path) -> None:
    _expect(tmp_path / "nope", "not a checkpoint directory")
    (tmp_path / "empty").mkdir()
    _expect(tmp_path / "empty", "config.json: missing")


def test_unknown_architecture(checkpoint: Path) -> None:
    _config(checkpoint, model_type="llama", architectures=["LlamaForCausalLM"])
    _expect(checkpoint, "unknown architecture model_type='llama'", "supported: qwen2, qwen3")


def test_unsupported_rope_scaling(checkpoint: Path) -> None:
    _config(checkpoint, rope_scaling={"type": "yarn", "factor": 4.0})
    _expect(checkpoint, "RoPE scaling", "yarn")


def test_missing_tensor(checkpoint: Path) -> None:
    _rewrite(checkpoint, keep=lambda n: n != "model.layers.1.mlp.up_proj.weight")
    _expect(checkpoint, "missing tensor(s) ['model.layers.1.mlp.up_proj.weight']")


def test_wrong_shape(checkpoint: Path) -> None:
    def shrink(arrays: dict) -> dict:
        arrays["model.layers.0.self_attn.q_proj.weight"] = arrays[
            "model.layers.0.self_attn.q_proj.weight"
        ][:32]
        return arrays

    _rewrite(checkpoint, change=shrink)
    _expect(checkpoint, "'model.layers.0.self_attn.q_proj.weight' has shape [32, 64]", "[64, 64]")


def test_config_and_weights_disagree(checkpoint: Path) -> None:
    _config(checkpoint, num_hidden_layers=1)
    _expect(checkpoint, "unexpected tensor(s)", "model.layers.1.", "do not match")
    _config(checkpoint, num_hidden_layers=3)
    _expect(checkpoint, "missing tensor(s)", "model.layers.2.", "do not match")


def test_truncated_safetensors(checkpoint: Path) -> None:
    file = checkpoint / "model.safetensors"
    file.write_bytes(file.read_bytes()[:-100])
    _expect(checkpoint, "model.safetensors: truncated")
    file.write_bytes(b"\x05\x00")
    _expect(checkpoint, "truncated safetensors file (2 bytes)")


def test_garbage_header(checkpoint: Path) -> None:
    (checkpoint / "model.safetensors").write_bytes(
        b"\x10" + b"\x00" * 7 + b"not json at all!" + b"x" * 64
    )
    _expect(checkpoint, "malformed safetensors header")


def test_no_weights_and_broken_index(checkpoint: Path) -> None:
    (checkpoint / "model.safetensors").unlink()
    _expect(checkpoint, "no model.safetensors and no model.safetensors.index.json")
    (checkpoint / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"model.norm.weight": "model-00001-of-00002.safetensors"}})
    )
    _expect(checkpoint, "lists model-00001-of-00002.safetensors, which does not exist")


def test_a_failed_load_returns_nothing_and_leaves_files_alone(checkpoint: Path) -> None:
    before = {p.name: p.read_bytes() for p in checkpoint.iterdir()}
    _config(checkpoint, num_hidden_layers=1)
    before["config.json"] = (checkpoint / "config.json").read_bytes()
    _expect(checkpoint, "unexpected tensor(s)")
    assert {p.name: p.read_bytes() for p in checkpoint.iterdir()} == before


def test_dtype_override_converts_on_load(checkpoint: Path, tmp_path: Path) -> None:
    model = load_pretrained(checkpoint, param_dtype="bfloat16")
    assert {a.dtype for a in flat_params(model).values()} == {jnp.dtype(jnp.bfloat16)}
    save_pretrained(model, tmp_path / "bf16")
    assert json.loads((tmp_path / "bf16" / "config.json").read_text())["torch_dtype"] == "bfloat16"
    again = load_pretrained(tmp_path / "bf16")  # the checkpoint's dtype is the default
    assert again.config.param_dtype == "bfloat16"
