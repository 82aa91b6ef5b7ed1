"""The policy models: Qwen2/Qwen3 in Flax NNX, Hugging Face checkpoints, meshes.

Public entry points: :func:`load_pretrained` (a checkpoint directory → a model that
maps int32 token ids (batch, length) to a :class:`QwenOutput`, logits (batch, length,
vocab) and optionally the cache and hidden states) and :func:`save_pretrained` (a
model → a directory that ``transformers`` loads).
"""

from rlax_core.models.logprobs import policy_log_softmax, teacher_forced_logprobs
from rlax_core.models.params import flat_params, init_model, place_model, replace_params
from rlax_core.models.pretrained import load_pretrained, read_config, save_pretrained
from rlax_core.models.qwen import PRESETS, Qwen, QwenConfig, QwenOutput
from rlax_core.models.safetensors_file import CheckpointError
from rlax_core.models.sharding import MeshShape

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
