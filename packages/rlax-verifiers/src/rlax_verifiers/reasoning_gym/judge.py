"""The ``reasoning_gym`` judge: a reasoning-gym task's own scorer decides the reward."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, Field

from rlax_core.contracts import Judge
from rlax_core.types.verdict import Verdict, VerdictStatus
from rlax_verifiers.reasoning_gym.library import reasoning_gym


class ReasoningGymJudgeConfig(BaseModel):
    """Scores answers to reasoning-gym problems with their task's scorer."""

    tag: str = Field(
        default="answer", description="The tag the answer is written in: <tag>…</tag>."
    )


class ReasoningGymJudge(Judge):
    """The reward is the task's score of the answer (1.0 right, partial credit where the
    task gives it); a completion without an answer gets 0, a problem that is not a
    reasoning-gym one an IE verdict."""

    def __init__(self, config: ReasoningGymJudgeConfig) -> None:
        self.config = config
        self._gym = reasoning_gym()
        self._scorers: dict[str, Any] = {}

    def judge(
        self, problems: Sequence[Mapping[str, Any]], completions: Sequence[str]
    ) -> list[Verdict]:
        return [self._one(p, c) for p, c in zip(problems, completions, strict=True)]

    def _one(self, problem: Mapping[str, Any], completion: str) -> Verdict:
        entry, task = problem.get("entry"), problem.get("task")
        if problem.get("kind") != "reasoning_gym" or not isinstance(entry, dict) or not task:
            message = "not a reasoning-gym problem (kind, task and entry)"
            return Verdict(status=VerdictStatus.IE, reward=None, message=message)
        answer = self._gym.utils.extract_answer(completion, tag_name=self.config.tag)
        if answer is None:
            return Verdict(status=VerdictStatus.WA, reward=0.0,
                           message=f"no <{self.config.tag}> in the completion")  # fmt: skip
        scorer = self._scorers.get(task)
        if scorer is None:
            scorer = self._scorers[task] = self._gym.get_score_answer_fn(task)
        score = float(scorer(answer, entry))
        status = VerdictStatus.AC if score >= 1.0 else VerdictStatus.WA
        return Verdict(status=status, reward=score, message=f"{task} scored {score:g}")


def make_reasoning_gym_judge(config: ReasoningGymJudgeConfig, context) -> ReasoningGymJudge:
    return ReasoningGymJudge(config)
