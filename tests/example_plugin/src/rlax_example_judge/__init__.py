"""An example third-party RLAX plugin: the ``keyword`` judge.

A completion earns ``reward`` if it contains the problem's ``keyword`` (or the one in the
judge's config). This whole file is what a plugin author writes; the entry point in
pyproject.toml is how RLAX finds it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, Field

from rlax_core.contracts import Judge
from rlax_core.hookspecs import hookimpl
from rlax_core.types import Verdict, VerdictStatus


class KeywordJudgeConfig(BaseModel):
    """Rewards completions that contain a keyword."""

    keyword: str | None = Field(
        default=None, description="Keyword to look for when a problem names none."
    )
    case_sensitive: bool = Field(default=False, description="Match the keyword's case exactly.")
    reward: float = Field(default=1.0, description="Reward of a completion with the keyword.")


class KeywordJudge(Judge):
    """Judges by keyword presence."""

    def __init__(self, config: KeywordJudgeConfig) -> None:
        self.config = config

    def judge(
        self, problems: Sequence[Mapping[str, Any]], completions: Sequence[str]
    ) -> list[Verdict]:
        verdicts = []
        for problem, completion in zip(problems, completions, strict=True):
            keyword = problem.get("keyword", self.config.keyword) or ""
            text = completion if self.config.case_sensitive else completion.lower()
            wanted = keyword if self.config.case_sensitive else keyword.lower()
            hit = bool(wanted) and wanted in text
            verdicts.append(
                Verdict(
                    status=VerdictStatus.AC if hit else VerdictStatus.WA,
                    reward=self.config.reward if hit else 0.0,
                )
            )
        return verdicts


def make_keyword_judge(config: KeywordJudgeConfig, context: Any) -> KeywordJudge:
    """Builds the judge from its validated config."""
    return KeywordJudge(config)


@hookimpl
def register_judges(register: Any) -> None:
    """Registers the ``keyword`` judge."""
    register("keyword", make_keyword_judge, KeywordJudgeConfig)
