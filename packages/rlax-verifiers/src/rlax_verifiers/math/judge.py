"""The ``math`` judge: reward 1 when the final answer equals the problem's answer."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from rlax_core.contracts.verifier import Judge
from rlax_core.plugins.registry import BuildContext
from rlax_core.types.verdict import Verdict, VerdictStatus
from rlax_verifiers.math.answers import answers_match, extract_answer


class MathJudgeConfig(BaseModel):
    """Math answers: boxed, '####' or 'answer:' markers, fractions, decimals, simple LaTeX."""

    model_config = ConfigDict(extra="forbid")

    rel_tol: float = Field(
        default=1e-6, ge=0.0, description="Relative tolerance when both answers are numbers."
    )
    correct_reward: float = Field(default=1.0, description="Reward of a correct answer.")
    wrong_reward: float = Field(default=0.0, description="Reward of a wrong or missing answer.")


class MathJudge(Judge):
    """Judges ``{"kind": "math", "answer": "..."}`` problems."""

    def __init__(self, config: MathJudgeConfig | None = None) -> None:
        self.config = config or MathJudgeConfig()

    def judge(
        self, problems: Sequence[Mapping[str, Any]], completions: Sequence[str]
    ) -> list[Verdict]:
        """Judges each completion's final answer against its problem's ``answer``."""
        if len(problems) != len(completions):
            raise ValueError(f"{len(problems)} problems but {len(completions)} completions")
        return [self._one(p, c) for p, c in zip(problems, completions, strict=True)]

    def _one(self, problem: Mapping[str, Any], completion: str) -> Verdict:
        expected = problem.get("answer")
        if expected is None:
            return Verdict(
                status=VerdictStatus.SE,
                reward=None,
                message="problem has no 'answer' field; the math judge needs one",
            )
        predicted = extract_answer(completion)
        if predicted is None:
            return Verdict(
                status=VerdictStatus.WA, reward=self.config.wrong_reward, message="no answer found"
            )
        if answers_match(predicted, str(expected), rel_tol=self.config.rel_tol):
            return Verdict(status=VerdictStatus.AC, reward=self.config.correct_reward)
        return Verdict(
            status=VerdictStatus.WA,
            reward=self.config.wrong_reward,
            message=f"answered {predicted[:80]!r}",
        )


def make_math_judge(config: MathJudgeConfig, context: BuildContext) -> MathJudge:
    """Builds the math judge from its config."""
    return MathJudge(config)
