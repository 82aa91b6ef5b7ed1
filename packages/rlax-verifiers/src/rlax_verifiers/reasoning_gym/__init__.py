"""reasoning-gym as a prompt source and a judge (the ``reasoning-gym`` extra).

reasoning-gym (PyPI ``reasoning-gym``) has over a hundred procedural task generators,
each with its own scorer. The ``reasoning_gym`` prompt source makes a dataset of one
task from its generator settings and a seed; each example's problem carries the task's
entry, and the ``reasoning_gym`` judge scores a completion's answer (what it writes in
``<answer>…</answer>``, reasoning-gym's convention) with that task's scorer.
"""

from rlax_verifiers.reasoning_gym.judge import ReasoningGymJudge, ReasoningGymJudgeConfig
from rlax_verifiers.reasoning_gym.source import ReasoningGymSource, ReasoningGymSourceConfig

__all__ = [
    "ReasoningGymJudge",
    "ReasoningGymJudgeConfig",
    "ReasoningGymSource",
    "ReasoningGymSourceConfig",
]
