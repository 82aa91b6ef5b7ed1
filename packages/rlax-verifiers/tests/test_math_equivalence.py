"""The math judge on the equivalence cases of ``math_equivalence_cases.jsonl``.

Each line is ``{"topic", "gold", "completion", "verdict"}``: a problem's ``answer``
field, a whole completion and the verdict it must get (AC or WA) under the default
config. The cases are judged as one batch, as a training step would send them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlax_core.types import Verdict
from rlax_verifiers.math import MathJudge, MathJudgeConfig

CASES = [
    json.loads(line)
    for line in (Path(__file__).parent / "math_equivalence_cases.jsonl").read_text().splitlines()
    if line.strip()
]
TOPICS = {
    "integers", "decimals", "fractions", "roots", "negatives", "percentages", "scientific",
    "intervals", "sets", "tuples", "matrices", "expressions", "equations", "units", "degrees",
    "markers", "gsm8k", "quickstart", "rejects",
}  # fmt: skip


@pytest.fixture(scope="module")
def verdicts() -> Iterator[list[Verdict]]:
    judge = MathJudge(MathJudgeConfig(workers=2))
    try:
        yield judge.judge(
            [{"kind": "math", "answer": case["gold"]} for case in CASES],
            [case["completion"] for case in CASES],
        )
    finally:
        judge.close()


def test_the_cases_cover_every_topic_both_ways() -> None:
    assert len(CASES) >= 200
    assert {case["topic"] for case in CASES} == TOPICS
    assert {case["verdict"] for case in CASES} == {"AC", "WA"}
    for topic in TOPICS - {"rejects"}:
        assert {c["verdict"] for c in CASES if c["topic"] == topic} == {"AC", "WA"}, topic


@pytest.mark.parametrize("index", range(len(CASES)), ids=lambda i: f"{CASES[i]['topic']}-{i}")
def test_verdict(index: int, verdicts: list[Verdict]) -> None:
    case, verdict = CASES[index], verdicts[index]
    assert verdict.status == case["verdict"], (case, verdict.message)


def test_agreement_with_math_verify_defaults(
    verdicts: list[Verdict], capsys: pytest.CaptureFixture
) -> None:
    """How often ``verify(parse(gold), parse(completion))`` alone agrees (printed, not held)."""
    from math_verify import parse, verify

    logging.getLogger("math_verify").setLevel(logging.CRITICAL)
    agree = sum(
        ("AC" if verify(parse(case["gold"]), parse(case["completion"])) else "WA") == verdict.status
        for case, verdict in zip(CASES, verdicts, strict=True)
    )
    with capsys.disabled():
        print(f"\nmath judge vs math_verify.verify(parse(gold), parse(pred)) on its defaults: "
              f"{agree} of {len(CASES)} verdicts agree")  # fmt: skip
    assert 0 < agree <= len(CASES)
