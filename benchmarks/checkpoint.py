"""Checkpoint loading: peak resident memory of load_pretrained beside a host-copy loader.

Each loader runs in a fresh process (benchmarks._load_memory) on the same random
checkpoint; the figure is the growth of resident memory while loading, in multiples of
the checkpoint's size (lower is better; the target is under 1.5×).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from benchmarks import _load_memory
from rlax_core.bench import Bench
from rlax_core.models import QwenConfig, init_model, save_pretrained


def _growth(path: Path, mode: str) -> float:
    result = _load_memory.measure(path, mode)
    return (result["peak"] - result["rss_before"]) / result["checkpoint_bytes"]


def run(bench: Bench) -> None:
    """Runs the checkpoint suite."""
    layers = 2 if bench.quick else 8
    config = QwenConfig.tiny(
        vocab_size=16384, hidden_size=1024, intermediate_size=2816, num_layers=layers,
        num_heads=8, num_kv_heads=4, head_dim=128, tie_embeddings=False,
    )  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp)
        save_pretrained(init_model(config, seed=0), path, max_shard_bytes=200 << 20)
        bench.notes["checkpoint_bytes"] = sum(f.stat().st_size for f in path.glob("*.safetensors"))
        bench.record(
            "peak memory while loading (× checkpoint size)",
            subject=_growth(path, "rlax"),
            baseline=_growth(path, "naive"),
            unit="× size",
            higher_is_better=False,
            subject_label="load_pretrained (mapped file → shards)",
            baseline_label="read each tensor to host, then place it",
        )
