"""Generation: the KV-cache sampler and the sampling distribution."""

from rlax_core.generate.next_token import SamplingParams, choose, truncate
from rlax_core.generate.sampler import PROMPT_BUCKETS, Completions, Sampler

__all__ = [
    "PROMPT_BUCKETS",
    "Completions",
    "Sampler",
    "SamplingParams",
    "choose",
    "truncate",
]
