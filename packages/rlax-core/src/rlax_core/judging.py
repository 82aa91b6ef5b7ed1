"""Judging a batch so that one bad completion never takes its batch-mates down.

A judge (ours or a third party's) decides a batch of completions in one call. If that
call raises, or returns the wrong number of verdicts, :func:`judge_isolated` judges the
batch's items one by one: an item whose own call raises gets an SE verdict naming the
exception, and every other item keeps its verdict. SE verdicts (the infrastructure
failed, so nothing is known) are judged again, alone, a bounded number of times; one
still SE after that is reported as SE with its reason, never turned into a reward of 0.
Errors of RLAX itself (:class:`~rlax_core.errors.RlaxError`: a bad config, a closed
transport) are not a completion's fault and still propagate.

The worker, the verifier role, evaluation and ``rlax verify`` all judge through here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rlax_core.contracts.verifier import Judge
from rlax_core.errors import RlaxError
from rlax_core.types.verdict import Verdict, VerdictStatus

SE_RETRIES = 1
"""How many more times an SE verdict is judged again, alone, before it is reported."""


def judge_isolated(
    judge: Judge,
    problems: Sequence[Mapping[str, Any]],
    completions: Sequence[str],
    *,
    se_retries: int = SE_RETRIES,
) -> list[Verdict]:
    """Judges ``completions[i]`` against ``problems[i]``; one verdict per item, in order.

    Args:
        judge: the judge.
        problems / completions: the batch.
        se_retries: how many more times an SE item is judged again on its own.

    Raises:
        ValueError: ``problems`` and ``completions`` differ in length.
        RlaxError: the judge raised one (a problem of the run, not of an item).
    """
    if len(problems) != len(completions):
        raise ValueError(f"{len(problems)} problems but {len(completions)} completions")
    if not problems:
        return []
    verdicts = _batch(judge, problems, completions)
    if verdicts is None:  # the batch call failed: judge each item on its own
        verdicts = [_one(judge, p, c) for p, c in zip(problems, completions, strict=True)]
    for i, verdict in enumerate(verdicts):
        for _ in range(se_retries):
            if verdict.status is not VerdictStatus.SE:
                break
            verdict = _one(judge, problems[i], completions[i])
        if verdict.status is VerdictStatus.SE and se_retries:
            verdict = verdict.model_copy(
                update={"message": f"{verdict.message} (still SE after {se_retries} retries)"}
            )
        verdicts[i] = verdict
    return verdicts


def _batch(
    judge: Judge, problems: Sequence[Mapping[str, Any]], completions: Sequence[str]
) -> list[Verdict] | None:
    """The judge's verdicts of the whole batch, or None if the call failed."""
    try:
        verdicts = list(judge.judge(problems, completions))
    except RlaxError:
        raise
    except Exception:  # a judge's bug: find the items it is about, one by one
        return None
    if len(verdicts) != len(problems) or not all(isinstance(v, Verdict) for v in verdicts):
        return None
    return verdicts


def _one(judge: Judge, problem: Mapping[str, Any], completion: str) -> Verdict:
    """The verdict of one item, SE with the reason if judging it raised."""
    try:
        verdicts = list(judge.judge([problem], [completion]))
    except RlaxError:
        raise
    except Exception as exc:
        return _failed(judge, f"{type(exc).__name__}: {exc}")
    if len(verdicts) != 1 or not isinstance(verdicts[0], Verdict):
        return _failed(judge, f"returned {len(verdicts)} results for one completion")
    return verdicts[0]


def _failed(judge: Judge, reason: str) -> Verdict:
    return Verdict(
        status=VerdictStatus.SE,
        reward=None,
        message=f"the {type(judge).__name__} judge failed on this completion: {reason[:500]}",
    )
