"""Generation: the KV-cache sampler and the sampling distribution."""

from rlax_core.generate.sampler import PROMPT_BUCKETS, Completions, Sampler
from rlax_core.generate.sampling import SamplingParams, choose, truncate

__all__ = [
    "PROMPT_BUCKETS",
    "Completions",
    "Sampler",
    "SamplingParams",
    "choose",
    "truncate",
]
