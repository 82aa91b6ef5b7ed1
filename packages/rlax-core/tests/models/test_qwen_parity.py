"""Logits and per-layer hidden states equal transformers' on tiny random checkpoints."""

from __future__ import annotations

from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

from rlax_core.models import load_pretrained

CONFIGS = ["qwen2_tied_gqa2", "qwen2_untied_mha", "qwen2_odd_heads", "qwen3_gqa4", "qwen3_odd_gqa5"]
FP32_TOLERANCE = 1e-4  # max |ours - HF| / max |HF|
# bf16 parameters and activations against HF's bf16 forward. Measured on the five
# configs: 1.1e-2 … 2.7e-2 (and 1.6e-2 … 2.7e-2 against the fp32 reference).
BF16_TOLERANCE = 5e-2


def relative_error(ours: np.ndarray, reference: np.ndarray) -> float:
    return float(np.abs(np.asarray(ours, np.float64) - reference).max() / np.abs(reference).max())


@pytest.mark.parametrize("name", CONFIGS)
def test_logits_and_every_layer_match_transformers(hf_reference: Path, name: str) -> None:
    reference = np.load(hf_reference / name / "reference.npz")
    model = load_pretrained(hf_reference / name)
    out = model(jnp.asarray(reference["tokens"]), return_hidden_states=True)
    logits, hidden = out.logits, out.hidden_states
    assert out.cache is None
    assert logits.shape == (*reference["tokens"].shape, 384)
    assert logits.dtype == jnp.float32
    assert relative_error(logits, reference["logits"]) < FP32_TOLERANCE
    assert len(hidden) == len(reference["hidden"])
    for layer, (ours, theirs) in enumerate(zip(hidden, reference["hidden"], strict=True)):
        assert relative_error(ours, theirs) < FP32_TOLERANCE, f"hidden state {layer}"


@pytest.mark.parametrize("name", CONFIGS)
def test_left_padded_batches_match_transformers(hf_reference: Path, name: str) -> None:
    reference = np.load(hf_reference / name / "reference.npz")
    model = load_pretrained(hf_reference / name)
    logits = np.asarray(
        model(jnp.asarray(reference["padded"]), jnp.asarray(reference["valid"])).logits
    )
    valid = reference["valid"]
    assert relative_error(logits[valid], reference["padded_logits"][valid]) < FP32_TOLERANCE


def test_sharded_checkpoints_load(hf_reference: Path) -> None:
    reference = np.load(hf_reference / "qwen2_untied_mha" / "reference.npz")
    assert (hf_reference / "qwen2_untied_mha_sharded" / "model.safetensors.index.json").exists()
    model = load_pretrained(hf_reference / "qwen2_untied_mha_sharded")
    logits = model(jnp.asarray(reference["tokens"])).logits
    assert relative_error(logits, reference["logits"]) < FP32_TOLERANCE


@pytest.mark.parametrize("name", CONFIGS)
def test_bfloat16_stays_within_its_documented_tolerance(hf_reference: Path, name: str) -> None:
    reference = np.load(hf_reference / name / "reference.npz")
    model = load_pretrained(hf_reference / name, param_dtype="bfloat16")
    assert model.model.embed_tokens.weight[...].dtype == jnp.bfloat16
    logits = model(jnp.asarray(reference["tokens"])).logits
    assert relative_error(logits, reference["bf16_logits"]) < BF16_TOLERANCE
