"""prime-intellect's ``verifiers`` environments in RLAX workers (the ``prime`` extra).

A ``verifiers`` environment is a module whose ``load_environment(**args)`` returns a
``SingleTurnEnv``, ``MultiTurnEnv`` or ``ToolEnv`` with its dataset and rubric. Two
plugins run one in a training run:

- the ``verifiers`` prompt source gives the environment's dataset, its prompts as the
  environment formatted them (system prompt, few-shot turns) and each row as the problem;
- the ``verifiers`` environment runs the environment's own rollout per episode, with an
  OpenAI client on the worker's endpoint (:class:`~rlax_core.environments.
  ClientEnvironment`), and its rubric's score is the reward.

The model's turns are the worker's, sampled on its engine; the environment's replies
(tool results, user turns) are appended as tokens, so the rollout trains token-exactly.
"""

from rlax_verifiers.prime.environment import VerifiersEnvironment, VerifiersEnvironmentConfig
from rlax_verifiers.prime.source import VerifiersSource, VerifiersSourceConfig

__all__ = [
    "VerifiersEnvironment",
    "VerifiersEnvironmentConfig",
    "VerifiersSource",
    "VerifiersSourceConfig",
]
