"""judge_isolated: one bad completion never takes its batch-mates down; SE is retried."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from rlax_core.contracts.verifier import Judge
from rlax_core.errors import ConfigError
from rlax_core.judging import judge_isolated
from rlax_core.types.verdict import Verdict, VerdictStatus

AC = Verdict(status=VerdictStatus.AC, reward=1.0)
WA = Verdict(status=VerdictStatus.WA, reward=0.0)


class ScriptedJudge(Judge):
    """AC for "right", WA for other text; raises on "boom"; SE for the first ``flaky``
    calls that see "flaky"; raises ConfigError on "config"."""

    def __init__(self, flaky: int = 0) -> None:
        self.flaky = flaky
        self.calls: list[list[str]] = []

    def judge(self, problems: Sequence[Mapping[str, Any]], completions: Sequence[str]):
        self.calls.append(list(completions))
        verdicts = []
        for text in completions:
            if text == "boom":
                raise OverflowError("integer division result too large for a float")
            if text == "config":
                raise ConfigError("the judge's sandbox is misconfigured")
            if text == "flaky" and self.flaky:
                self.flaky -= 1
                verdicts.append(Verdict(status=VerdictStatus.SE, reward=None, message="lost"))
                continue
            verdicts.append(AC if text == "right" else WA)
        return verdicts


def test_an_exception_on_one_completion_gives_it_se_and_its_neighbours_their_verdicts() -> None:
    judge = ScriptedJudge()
    verdicts = judge_isolated(judge, [{}] * 4, ["right", "boom", "wrong", "right"])
    assert [v.status for v in verdicts] == ["AC", "SE", "WA", "AC"]
    assert verdicts[1].reward is None
    assert "OverflowError: integer division result too large" in verdicts[1].message
    assert len(judge.calls) == 1 + 4 + 1  # the batch, each item alone, the SE item once more


def test_se_is_judged_again_alone_and_reported_when_it_stays_se() -> None:
    recovers = ScriptedJudge(flaky=1)  # SE once, then judged (WA: "flaky" is not "right")
    assert [v.status for v in judge_isolated(recovers, [{}] * 2, ["flaky", "right"])] == [
        "WA",
        "AC",
    ]
    stays = ScriptedJudge(flaky=10)
    verdict = judge_isolated(stays, [{}], ["flaky"], se_retries=3)[0]
    assert (verdict.status, verdict.reward) == (VerdictStatus.SE, None)
    assert "still SE after 3 retries" in verdict.message
    assert len(stays.calls) == 4


def test_a_judge_returning_the_wrong_count_is_judged_item_by_item() -> None:
    class Short(ScriptedJudge):
        def judge(self, problems, completions):
            return super().judge(problems, completions)[:1]

    verdicts = judge_isolated(Short(), [{}] * 3, ["right", "wrong", "right"])
    assert [v.status for v in verdicts] == ["AC", "WA", "AC"]


def test_errors_of_the_run_itself_propagate() -> None:
    with pytest.raises(ConfigError, match="misconfigured"):
        judge_isolated(ScriptedJudge(), [{}] * 2, ["right", "config"])
    with pytest.raises(ValueError, match="2 problems but 1 completions"):
        judge_isolated(ScriptedJudge(), [{}] * 2, ["right"])
