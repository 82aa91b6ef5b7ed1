"""The Qwen2 / Qwen2.5 / QwQ / Qwen3 decoder family."""

from rlax_core.models.qwen.config import PRESETS, QwenConfig
from rlax_core.models.qwen.model import KVCache, Qwen, QwenOutput

__all__ = ["PRESETS", "KVCache", "Qwen", "QwenConfig", "QwenOutput"]
