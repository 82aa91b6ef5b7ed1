"""The paged KV cache and continuous batching: block bookkeeping and step planning."""

from rlax_core.generate.paged.blocks import SCRATCH_BLOCK, BlockPool
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
    "PrefillChunk",
    "Request",
    "Sample",
    "Scheduler",
    "SchedulerStats",
    "StepPlan",
]
