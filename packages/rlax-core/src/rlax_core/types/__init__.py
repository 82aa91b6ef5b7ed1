"""Data records that cross process boundaries (explicit JSON, never pickle)."""

from rlax_core.types.lease import Lease, QueueStats
from rlax_core.types.policy import PolicyVersion, TensorInfo
from rlax_core.types.record import Record
from rlax_core.types.rollout import PromptGroup, Rollout, RolloutGroup
from rlax_core.types.verdict import ExecutionResult, TestOutcome, Verdict, VerdictStatus

__all__ = [
    "ExecutionResult",
    "Lease",
    "PolicyVersion",
    "PromptGroup",
    "QueueStats",
    "Record",
    "Rollout",
    "RolloutGroup",
    "TensorInfo",
    "TestOutcome",
    "Verdict",
    "VerdictStatus",
]
