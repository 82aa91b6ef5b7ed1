"""Tunix's Qwen2 config for an RLAX / Hugging Face checkpoint (Tunix venv only)."""

from __future__ import annotations

import json
from pathlib import Path

from tunix.models.qwen2 import model as model_lib


def model_config(checkpoint: Path) -> model_lib.ModelConfig:
    """Tunix's Qwen2 config for the checkpoint's config.json."""
    hf = json.loads((checkpoint / "config.json").read_text())
    return model_lib.ModelConfig(
        num_layers=hf["num_hidden_layers"], vocab_size=hf["vocab_size"],
        embed_dim=hf["hidden_size"], hidden_dim=hf["intermediate_size"],
        num_heads=hf["num_attention_heads"], head_dim=hf["head_dim"],
        num_kv_heads=hf["num_key_value_heads"], rope_theta=int(hf["rope_theta"]),
        norm_eps=hf["rms_norm_eps"], use_tied_embedding=hf["tie_word_embeddings"],
    )  # fmt: skip
