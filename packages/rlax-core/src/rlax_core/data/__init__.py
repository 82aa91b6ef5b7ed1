"""Prompt datasets (JSONL, Parquet) and the seeded, resumable training mixture over them."""

from rlax_core.data.dataset import PromptDataset, PromptExample
from rlax_core.data.mixture import PromptMixture

__all__ = ["PromptDataset", "PromptExample", "PromptMixture"]
