"""The ``verifiers`` prompt source: a ``verifiers`` environment's dataset."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import Field

from rlax_core.contracts import PromptExample, PromptSource
from rlax_core.errors import ConfigError
from rlax_core.kit.environment import BadRequestError, template_message
from rlax_verifiers.prime.library import EnvironmentSpec, load


class VerifiersSourceConfig(EnvironmentSpec):
    """The dataset of a ``verifiers`` environment (the same settings as the
    ``verifiers`` environment of the run, so its prompts are the ones it expects)."""

    split: Literal["train", "eval"] = Field(
        default="train", description="Its dataset (train) or its eval dataset."
    )
    size: int | None = Field(default=None, ge=1, description="The first examples only.")


class VerifiersSource(PromptSource):
    def __init__(self, config: VerifiersSourceConfig) -> None:
        self.config = config

    def examples(self, dataset_name: str) -> Sequence[PromptExample]:
        environment, config = load(self.config), self.config
        n = config.size or -1
        try:
            rows = (environment.get_dataset(n=n) if config.split == "train"
                    else environment.get_eval_dataset(n=n))  # fmt: skip
        except Exception as exc:  # no such split, or its builder failed
            reason = f"{type(exc).__name__}: {exc}"
            raise ConfigError(f"the verifiers environment {config.environment!r} has no "
                              f"{config.split} dataset: {reason}") from None  # fmt: skip
        examples = []
        for index, row in enumerate(rows):
            row = json.loads(json.dumps(dict(row), default=str))  # it travels as JSON
            prompt = row.get("prompt")
            if not isinstance(prompt, list) or not prompt:
                raise ConfigError(f"row {index} of {config.environment!r} has no chat prompt "
                                  "(RLAX trains chat environments)")  # fmt: skip
            try:
                messages = tuple(template_message(_present(m)) for m in prompt)
            except BadRequestError as exc:
                raise ConfigError(f"row {index} of {config.environment!r}: {exc}") from None
            example_id = f"{dataset_name}/{row.get('example_id', index)}"
            text = messages[-1]["content"]
            examples.append(PromptExample(example_id, text, {"kind": "verifiers", "input": row},
                                          messages=messages))  # fmt: skip
        return examples


def _present(message: Any) -> Any:
    """A dataset message without the fields a table gives every row (None where unset)."""
    if not isinstance(message, dict):
        return message
    return {key: value for key, value in message.items() if value is not None}


def make_verifiers_source(config: VerifiersSourceConfig, context) -> VerifiersSource:
    return VerifiersSource(config)
