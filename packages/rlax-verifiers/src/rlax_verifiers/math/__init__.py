"""The math judge: final-answer extraction and equivalence."""

from rlax_verifiers.math.answers import answers_match, extract_answer
from rlax_verifiers.math.judge import MathJudge, MathJudgeConfig

__all__ = ["MathJudge", "MathJudgeConfig", "answers_match", "extract_answer"]
