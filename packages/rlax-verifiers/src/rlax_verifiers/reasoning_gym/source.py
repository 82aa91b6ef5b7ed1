"""The ``reasoning_gym`` prompt source: one reasoning-gym task as a dataset."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field

from rlax_core.contracts import PromptExample, PromptSource
from rlax_core.errors import ConfigError
from rlax_verifiers.reasoning_gym.library import reasoning_gym

ANSWER_FORMAT = "Give your final answer inside <answer></answer> tags."


class ReasoningGymSourceConfig(BaseModel):
    """A dataset of one reasoning-gym task, made by its generator."""

    task: str = Field(description="The task's name, e.g. basic_arithmetic (reasoning_gym.factory).")
    config: dict[str, Any] = Field(
        default_factory=dict,
        description="The task generator's settings (its config class's fields, e.g. "
        "min_terms, max_digits).",
    )
    size: int = Field(default=1000, ge=1, le=1_000_000, description="Examples to make.")
    seed: int = Field(default=0, description="The generator's seed: same seed, same examples.")
    answer_format: bool = Field(
        default=True,
        description="Ask for the answer in <answer></answer> tags (what the judge reads) at "
        "the end of each question.",
    )


class ReasoningGymSource(PromptSource):
    def __init__(self, config: ReasoningGymSourceConfig) -> None:
        self.config = config

    def examples(self, dataset_name: str) -> Sequence[PromptExample]:
        gym, config = reasoning_gym(), self.config
        try:
            dataset = gym.create_dataset(config.task, size=config.size, seed=config.seed,
                                         **config.config)  # fmt: skip
        except Exception as exc:  # an unknown task or bad settings: the library's words
            raise ConfigError(
                f"reasoning-gym cannot make task {config.task!r} with {config.config}: "
                f"{type(exc).__name__}: {exc}"
            ) from None
        examples = []
        for index, entry in enumerate(dataset):
            question = entry["question"]
            if config.answer_format:
                question = f"{question}\n\n{ANSWER_FORMAT}"
            # The entry goes to the judge through JSON: anything else becomes its text.
            entry = json.loads(json.dumps(entry, default=str))
            problem = {"kind": "reasoning_gym", "task": config.task, "entry": entry}
            examples.append(PromptExample(f"{dataset_name}/{index}", question, problem))
        return examples


def make_reasoning_gym_source(config: ReasoningGymSourceConfig, context) -> ReasoningGymSource:
    return ReasoningGymSource(config)
