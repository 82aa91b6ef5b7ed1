"""The math judge: answer extraction and equivalence."""

from __future__ import annotations

import pytest

from rlax_core.types import VerdictStatus
from rlax_verifiers.math import MathJudge, MathJudgeConfig, answers_match, extract_answer


@pytest.mark.parametrize(
    ("completion", "answer"),
    [
        ("so the total is \\boxed{42}.", "42"),
        ("first \\boxed{1} then \\boxed{\\frac{3}{4}}", "\\frac{3}{4}"),
        ("nested \\boxed{x^{2}+1}", "x^{2}+1"),
        ("work...\n#### 1,234", "1,234"),
        ("The answer is: 17.", "17"),
        ("Final answer: -3/5", "-3/5"),
        ("I computed 3 then 4 then 12", "12"),
        ("no digits at all", None),
        ("unclosed \\boxed{12", "12"),  # falls back to the last number
    ],
)
def test_extract_answer(completion: str, answer: str | None) -> None:
    assert extract_answer(completion) == answer


@pytest.mark.parametrize(
    ("predicted", "expected"),
    [
        ("42", "42"),
        ("42.0", "42"),
        ("0.5", "1/2"),
        ("\\frac{1}{2}", "0.5"),
        ("\\dfrac{3}{4}", "3/4"),
        ("1,234", "1234"),
        ("50\\%", "0.5"),
        ("$7$", "7"),
        ("\\text{(B)}", "(B)"),
        ("x^{2} + 1", "x^{2}+1"),
        ("\\left( 1, 2 \\right)", "(1,2)"),
    ],
)
def test_equivalent_answers_match(predicted: str, expected: str) -> None:
    assert answers_match(predicted, expected)


@pytest.mark.parametrize(
    ("predicted", "expected"),
    [("41", "42"), ("0.333", "1/3"), ("1/0", "0"), ("x+1", "x-1"), ("-2", "2"), ("12", "1,2")],
)
def test_different_answers_do_not_match(predicted: str, expected: str) -> None:
    assert not answers_match(predicted, expected)


def test_numeric_tolerance_is_relative() -> None:
    assert answers_match("3.14159265", "3.14159266", rel_tol=1e-6)
    assert not answers_match("3.14", "3.14159266", rel_tol=1e-6)
    assert answers_match("3.14", "3.14159266", rel_tol=1e-3)


def test_judge_gives_verdicts_and_rewards() -> None:
    judge = MathJudge(MathJudgeConfig(correct_reward=1.0, wrong_reward=-0.5))
    try:
        verdicts = judge.judge(
            [{"kind": "math", "answer": "12"}] * 3 + [{"kind": "math"}],
            ["\\boxed{12}", "\\boxed{13}", "I give up", "\\boxed{1}"],
        )
    finally:
        judge.close()
    assert [v.status for v in verdicts] == [
        VerdictStatus.AC,
        VerdictStatus.WA,
        VerdictStatus.WA,
        VerdictStatus.IE,  # invalid input: the problem gives no answer to compare with
    ]
    assert [v.reward for v in verdicts[:3]] == [1.0, -0.5, -0.5]
    assert verdicts[2].message == "no answer found"
    assert "no 'answer' field" in verdicts[3].message


def test_judge_refuses_mismatched_batches() -> None:
    with pytest.raises(ValueError, match="2 problems but 1 completions"):
        MathJudge().judge([{"answer": "1"}] * 2, ["1"])
