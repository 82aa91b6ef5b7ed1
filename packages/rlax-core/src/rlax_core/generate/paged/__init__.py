"""The rollout engine: continuous batching over a paged KV cache."""

from rlax_core.generate.paged.attention import PagedAttention, paged_attention
from rlax_core.generate.paged.blocks import SCRATCH_BLOCK, BlockPool
from rlax_core.generate.paged.engine import Engine
from rlax_core.generate.paged.ragged_kernel import ragged_kernel_attention
from rlax_core.generate.paged.scheduler import (
    DecodeRow,
    PrefillChunk,
    Request,
    Sample,
    Scheduler,
    SchedulerStats,
    StepPlan,
)

__all__ = [
    "SCRATCH_BLOCK",
    "BlockPool",
    "DecodeRow",
    "Engine",
    "PagedAttention",
    "PrefillChunk",
    "Request",
    "Sample",
    "Scheduler",
    "SchedulerStats",
    "StepPlan",
    "paged_attention",
    "ragged_kernel_attention",
]
