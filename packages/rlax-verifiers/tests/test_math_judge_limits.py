"""The math judge on hostile completions: bounded time and memory, one item's fate its own."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pydantic
import pytest

from rlax_core.types import VerdictStatus
from rlax_verifiers.math import MathJudge, MathJudgeConfig
from rlax_verifiers.math.options import MatchOptions
from rlax_verifiers.math.pool import Task, WorkerPool

AC, WA, SE = VerdictStatus.AC, VerdictStatus.WA, VerdictStatus.SE
HOSTILE = {
    "tower": "\\boxed{9^{9^{9^{9}}}}",
    "factorial": "\\boxed{100000!}",
    "digits": "\\boxed{" + "9" * 100_000 + "}",
    "bare digits": "9" * 100_000,
    "nesting": "\\boxed{" + "(" * 50_000 + ")" * 50_000 + "}",
    "braces": "{" * 50_000,
    "5 MB": "x" * 5_000_000 + "\\boxed{4}",
    "NUL": "\\boxed{\x00" * 1000,
    "overflow": "\\boxed{1e999999}",
    "fractions": "\\frac{" * 20_000,
}


@pytest.fixture(scope="module")
def judge() -> Iterator[MathJudge]:
    judge = MathJudge(MathJudgeConfig(timeout_s=1.0, workers=2))
    yield judge
    judge.close()


def _workers() -> list[multiprocessing.Process]:
    return [p for p in multiprocessing.active_children() if p.name == "rlax-math-judge"]


def test_hostile_items_get_wa_and_leave_their_batch_mates_alone(judge: MathJudge) -> None:
    completions = [*HOSTILE.values(), "so the answer is \\boxed{3}", "3"]
    started = time.monotonic()
    verdicts = judge.judge([{"kind": "math", "answer": "3"}] * len(completions), completions)
    elapsed = time.monotonic() - started
    by_name = dict(zip([*HOSTILE, "boxed", "bare"], verdicts, strict=True))
    assert {name: v.status for name, v in by_name.items()} == {
        **{name: WA for name in HOSTILE},
        "boxed": AC,
        "bare": AC,
    }
    assert "pathological" in by_name["tower"].message
    assert all(v.reward == 0.0 for v in verdicts[: len(HOSTILE)])
    # Two workers, a one-second deadline each: far below a hang, whatever the machine load.
    assert elapsed < 60, elapsed


def test_the_judge_survives_its_hostile_batch(judge: MathJudge) -> None:
    judge.judge([{"answer": "3"}], [HOSTILE["tower"]])
    verdicts = judge.judge([{"answer": "1/2"}] * 2, ["\\boxed{0.5}", "\\boxed{\\frac{2}{4}}"])
    assert [v.status for v in verdicts] == [AC, AC]


def test_workers_run_under_an_address_space_limit(judge: MathJudge) -> None:
    judge.judge([{"answer": "x"}], ["\\boxed{x}"])
    (worker, *_) = _workers()
    limits = Path(f"/proc/{worker.pid}/limits").read_text()
    (line,) = [x for x in limits.splitlines() if x.startswith("Max address space")]
    soft = line.split()[3]
    assert soft != "unlimited" and int(soft) <= (1 << 30) + 512 * (1 << 20)


def test_a_worker_killed_from_outside_is_replaced_and_its_item_retried() -> None:
    # Its own judge, with time for the replacements to start on a busy machine (the
    # module's 1 s limit is for the hostile items).
    judge = MathJudge(MathJudgeConfig(timeout_s=20.0, workers=2))
    try:
        judge.judge([{"answer": "x"}] * 4, ["\\boxed{x}"] * 4)
        for worker in _workers():
            os.kill(worker.pid, signal.SIGKILL)
        verdicts = judge.judge([{"answer": "2x"}] * 4, ["\\boxed{x+x}"] * 4)
    finally:
        judge.close()
    assert [v.status for v in verdicts] == [AC] * 4


def test_a_worker_that_never_starts_gives_se_after_its_retries() -> None:
    # slice(conn, memory_mb) returns at once: a process that exits without greeting.
    pool = WorkerPool(workers=1, timeout_s=5.0, memory_mb=64, retries=1, target=slice)
    try:
        (outcome,) = pool.run([Task(gold="1", completion="\\boxed{1}", options=MatchOptions())])
    finally:
        pool.close()
    assert outcome.status == "SE"
    assert "failed 2 times" in outcome.message and "died while starting" in outcome.message


def test_threads_share_one_judge(judge: MathJudge) -> None:
    results: dict[int, list[VerdictStatus]] = {}

    def work(n: int) -> None:
        verdicts = judge.judge(
            [{"answer": str(n)}] * 6, [f"\\boxed{{{n}}}", f"\\boxed{{{n + 1}}}"] * 3
        )
        results[n] = [v.status for v in verdicts]

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert results == {n: [AC, WA] * 3 for n in range(4)}


def test_close_is_idempotent_and_the_judge_reusable() -> None:
    judge = MathJudge(MathJudgeConfig(workers=1))
    assert judge.judge([{"answer": "7"}], ["\\boxed{7}"])[0].status == AC
    judge.close()
    judge.close()
    assert judge.judge([{"answer": "7"}], ["\\boxed{8}"])[0].status == WA
    judge.close()


def test_long_completions_are_cut_to_their_tail() -> None:
    judge = MathJudge(MathJudgeConfig(max_chars=100, workers=1))
    try:
        verdicts = judge.judge(
            [{"answer": "5"}] * 2, ["\\boxed{5}" + " and so on" * 20, "so on " * 50 + "\\boxed{5}"]
        )
    finally:
        judge.close()
    assert [v.status for v in verdicts] == [WA, AC]


@pytest.mark.parametrize(
    ("config", "gold", "completion", "default", "changed"),
    [
        ({"accept_unmarked": False}, "42", "42", AC, WA),
        ({"accept_unmarked": False}, "x+1", "we get $x+1$", AC, WA),
        ({"allow_set_relation_comp": True}, "(1, \\infty)", "\\boxed{x > 1}", WA, AC),
        ({"strict": False}, "x+1", "\\boxed{y+1}", WA, AC),
        ({"float_rounding": 2}, "(\\frac{1}{3}, 1)", "\\boxed{(0.33, 1)}", WA, AC),
        ({"rel_tol": 1e-2}, "3.14159", "\\boxed{3.14}", WA, AC),
    ],
)
def test_options(
    config: dict, gold: str, completion: str, default: VerdictStatus, changed: VerdictStatus
) -> None:
    statuses = []
    for judge in (MathJudge(MathJudgeConfig(workers=1)), MathJudge(MathJudgeConfig(**config))):
        try:
            statuses.append(judge.judge([{"answer": gold}], [completion])[0].status)
        finally:
            judge.close()
    assert statuses == [default, changed]


def test_marked_answers_still_count_without_unmarked_ones() -> None:
    judge = MathJudge(MathJudgeConfig(accept_unmarked=False, workers=1))
    try:
        verdicts = judge.judge([{"answer": "42"}] * 3, ["\\boxed{42}", "#### 42", "Answer: 42"])
    finally:
        judge.close()
    assert [v.status for v in verdicts] == [AC, AC, AC]


def test_config_refuses_unknown_and_invalid_fields() -> None:
    with pytest.raises(pydantic.ValidationError):
        MathJudgeConfig(timeout=5)  # type: ignore[call-arg]
    with pytest.raises(pydantic.ValidationError):
        MathJudgeConfig(workers=0)
    assert all(f.description for f in MathJudgeConfig.model_fields.values())


def test_a_fresh_worker_is_warm_before_its_first_deadline() -> None:
    """A worker's first comparison builds the parsers' lazy state (~0.1 s here, far more
    on a loaded machine): it is done before the worker reports ready, so a worker that
    replaced a killed one does not give its first, right answer WA."""
    judge = MathJudge(MathJudgeConfig(timeout_s=0.05, workers=1))
    try:
        verdicts = judge.judge([{"answer": "1/2"}] * 2, ["\\boxed{0.5}", "\\boxed{\\frac{2}{4}}"])
        assert [v.status for v in verdicts] == [AC, AC], [v.message for v in verdicts]
    finally:
        judge.close()
