"""The policy models: Qwen2/Qwen3 in Flax NNX, Hugging Face checkpoints, meshes.

Public entry points: :func:`load_pretrained` (a checkpoint directory → a model that
maps int32 token ids (batch, length) to a :class:`QwenOutput`, logits (batch, length,
vocab) and optionally the cache and hidden states) and :func:`save_pretrained` (a
model → a directory that ``transformers`` loads).

The names are imported on first use (PEP 562): a process that needs only the tokenizer
(a verifier) or the checkpoint format does not import JAX and Flax with them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_HOMES = {
    "CheckpointError": "rlax_core.models.safetensors_file",
    "MeshShape": "rlax_core.models.sharding",
    "PRESETS": "rlax_core.models.qwen",
    "Qwen": "rlax_core.models.qwen",
    "QwenConfig": "rlax_core.models.qwen",
    "QwenOutput": "rlax_core.models.qwen",
    "flat_params": "rlax_core.models.params",
    "init_model": "rlax_core.models.params",
    "load_pretrained": "rlax_core.models.pretrained",
    "place_model": "rlax_core.models.params",
    "policy_log_softmax": "rlax_core.models.logprobs",
    "read_config": "rlax_core.models.pretrained",
    "replace_params": "rlax_core.models.params",
    "save_pretrained": "rlax_core.models.pretrained",
    "teacher_forced_logprobs": "rlax_core.models.logprobs",
}

__all__ = [
    "PRESETS",
    "CheckpointError",
    "MeshShape",
    "Qwen",
    "QwenConfig",
    "QwenOutput",
    "flat_params",
    "init_model",
    "load_pretrained",
    "place_model",
    "policy_log_softmax",
    "read_config",
    "replace_params",
    "save_pretrained",
    "teacher_forced_logprobs",
]

if TYPE_CHECKING:
    from rlax_core.models.logprobs import policy_log_softmax, teacher_forced_logprobs
    from rlax_core.models.params import flat_params, init_model, place_model, replace_params
    from rlax_core.models.pretrained import load_pretrained, read_config, save_pretrained
    from rlax_core.models.qwen import PRESETS, Qwen, QwenConfig, QwenOutput
    from rlax_core.models.safetensors_file import CheckpointError
    from rlax_core.models.sharding import MeshShape


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'rlax_core.models' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value
