"""Loading keeps peak resident memory under 1.5× the checkpoint size."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import _load_memory
from rlax_core.models import QwenConfig, init_model, save_pretrained

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def big_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # ~80M parameters, 320 MB in fp32: large against the process's own footprint.
    config = QwenConfig.tiny(
        vocab_size=16384, hidden_size=1024, intermediate_size=2816, num_layers=4,
        num_heads=8, num_kv_heads=4, head_dim=128, tie_embeddings=False,
    )  # fmt: skip
    path = tmp_path_factory.mktemp("big")
    save_pretrained(init_model(config, seed=0), path, max_shard_bytes=100 << 20)
    return path


def test_peak_memory_stays_under_one_and_a_half_checkpoints(big_checkpoint: Path) -> None:
    ours = _load_memory.measure(big_checkpoint, "rlax")  # in a fresh process
    growth = (ours["peak"] - ours["rss_before"]) / ours["checkpoint_bytes"]
    assert ours["checkpoint_bytes"] > 300 << 20
    assert growth < 1.5, f"peak grew by {growth:.2f}× the checkpoint"
