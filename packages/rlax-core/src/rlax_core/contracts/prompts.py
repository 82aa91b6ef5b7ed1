"""Prompt sources: where a dataset's prompts come from when they are not a file.

A data file (JSONL, Parquet) is read by core; a :class:`PromptSource` plugin
(``register_prompt_sources``) makes the examples instead — a procedural generator such as
reasoning-gym's, a hub dataset, a database — and ``data.train`` names it with
``source: {type: NAME, ...}``. Either way the run sees :class:`PromptExample` values:
the prompt text and the judge's problem.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class PromptExample:
    """One prompt of a dataset.

    Attributes:
        example_id: stable across runs: ``<dataset name>/<id field value or row index>``.
        prompt: the rendered prompt text (the loop applies the tokenizer's chat template,
            as one user message).
        problem: what the judge needs, in its native format, e.g.
            ``{"kind": "math", "answer": "42"}`` or a code problem with tests. The dataset
            hands out the same dict on every access: treat it as read-only.
        messages: the prompt as a conversation instead (``[{"role": "system", "content":
            ...}, {"role": "user", ...}]``), rendered through the chat template as it is;
            ``prompt`` is then its text, for logs. A source whose environment formats
            its own prompts (a system prompt, few-shot turns) gives these.
    """

    example_id: str
    prompt: str
    problem: dict[str, Any]
    messages: tuple[dict[str, Any], ...] = ()


class PromptSource(ABC):
    """Makes a dataset's examples, the same ones for the same settings (a run resumes
    into the same prompts)."""

    @abstractmethod
    def examples(self, dataset_name: str) -> Sequence[PromptExample]:
        """Every example, in a fixed order, with ids ``<dataset_name>/<its own id>``
        unique among them; each problem JSON-serialisable (it travels to the judge).

        Raises:
            ConfigError: the settings cannot make a dataset.
        """
