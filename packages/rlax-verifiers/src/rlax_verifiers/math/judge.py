"""The ``math`` judge: reward 1 when the final answer equals the problem's answer.

Equivalence is math-verify's (:mod:`rlax_verifiers.math.equivalence`), run in a pool of
worker processes with a deadline and a memory limit per answer
(:mod:`rlax_verifiers.math.pool`). When both the gold and the whole completion are short
plain numbers (``1374``, ``-2.5``), the judge compares them itself and skips the pool.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from rlax_core.contracts.verifier import Judge
from rlax_core.plugins.registry import BuildContext
from rlax_core.types.verdict import Verdict, VerdictStatus
from rlax_verifiers.math.answers import after_hashes, plain_number
from rlax_verifiers.math.options import MatchOptions
from rlax_verifiers.math.pool import Outcome, Task, WorkerPool


class MathJudgeConfig(BaseModel):
    """Math answers compared by math-verify, each judged under a time and memory limit."""

    model_config = ConfigDict(extra="forbid")

    rel_tol: float = Field(
        default=1e-6,
        ge=0.0,
        description="Relative tolerance between two numbers when either is written as a "
        "decimal (0.5 against 1/2). Integers and fractions must be equal exactly.",
    )
    float_rounding: int = Field(
        default=6,
        ge=0,
        description="Decimal places math-verify rounds floats to when comparing them inside "
        "expressions, percentages, sets, tuples and matrices.",
    )
    strict: bool = Field(
        default=True,
        description="math-verify's strict mode: variable names must match (x+1 is not y+1) "
        "and a set is not a tuple ({1,2} is not (1,2)). False compares leniently.",
    )
    allow_set_relation_comp: bool = Field(
        default=False,
        description="Compare an inequality with an interval (1<x<2 against (1,2)) whichever "
        "is the gold; by default only a gold inequality against a predicted set.",
    )
    accept_unmarked: bool = Field(
        default=True,
        description="Judge a completion with no \\boxed{}, '####' or answer marker by its "
        "last number or expression; False gives such a completion WA.",
    )
    correct_reward: float = Field(default=1.0, description="Reward of a correct answer.")
    wrong_reward: float = Field(default=0.0, description="Reward of a wrong or missing answer.")
    timeout_s: float = Field(
        default=5.0,
        gt=0.0,
        description="Wall time one completion may take to parse and compare; a worker that "
        "overruns is killed and the completion gets WA.",
    )
    memory_mb: int = Field(
        default=512,
        gt=0,
        description="Memory a worker may allocate beyond its start-up size (RLIMIT_AS); an "
        "answer that needs more gets WA.",
    )
    max_chars: int = Field(
        default=20_000,
        gt=0,
        description="Longer completions are cut to their last max_chars characters (where "
        "the final answer is) before parsing.",
    )
    workers: int = Field(
        default=2, ge=1, description="Worker processes judging a batch's completions in parallel."
    )
    retries: int = Field(
        default=2,
        ge=0,
        description="Times a completion is retried on a fresh worker after its worker died "
        "for another reason than the time limit, before it gets SE.",
    )


class MathJudge(Judge):
    """Judges ``{"kind": "math", "answer": "..."}`` problems.

    Thread-safe; its worker pool starts on the first completion that needs it and stays
    warm until :meth:`close` (after which a new call starts a new pool).
    """

    def __init__(self, config: MathJudgeConfig | None = None) -> None:
        self.config = config or MathJudgeConfig()
        c = self.config
        self._options = MatchOptions(
            rel_tol=c.rel_tol,
            float_rounding=c.float_rounding,
            strict=c.strict,
            allow_set_relation_comp=c.allow_set_relation_comp,
            accept_unmarked=c.accept_unmarked,
        )
        self._lock = threading.Lock()
        self._pool: WorkerPool | None = None

    def judge(
        self, problems: Sequence[Mapping[str, Any]], completions: Sequence[str]
    ) -> list[Verdict]:
        """Judges each completion's final answer against its problem's ``answer``."""
        if len(problems) != len(completions):
            raise ValueError(f"{len(problems)} problems but {len(completions)} completions")
        verdicts: list[Verdict | None] = []
        tasks: list[Task] = []
        for problem, completion in zip(problems, completions, strict=True):
            verdict, task = self._prepare(problem, completion)
            verdicts.append(verdict)
            if task is not None:
                tasks.append(task)
        outcomes = iter(self._worker_pool().run(tasks) if tasks else [])
        return [v if v is not None else self._verdict(next(outcomes)) for v in verdicts]

    def close(self) -> None:
        """Stops the worker pool (after the completions queued on it); idempotent."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()

    def _worker_pool(self) -> WorkerPool:
        with self._lock:
            if self._pool is None:
                c = self.config
                self._pool = WorkerPool(c.workers, c.timeout_s, c.memory_mb, c.retries)
            return self._pool

    def _prepare(
        self, problem: Mapping[str, Any], completion: str
    ) -> tuple[Verdict | None, Task | None]:
        """A verdict decided here, or the task for a worker."""
        expected = problem.get("answer")
        if expected is None:
            message = "problem has no 'answer' field; the math judge needs one"
            return Verdict(status=VerdictStatus.IE, reward=None, message=message), None
        gold = str(expected)
        text = completion[-self.config.max_chars :].replace("\x00", "")
        if not text.strip():
            return self._verdict(Outcome("WA", "no answer found")), None
        if self.config.accept_unmarked:  # a bare number is an unmarked answer
            quick = self._plain_numbers(after_hashes(gold) or gold, text)
            if quick is not None:
                return quick, None
        return None, Task(gold=gold, completion=text, options=self._options)

    def _plain_numbers(self, gold: str, text: str) -> Verdict | None:
        """The verdict when both sides are short plain numbers; None otherwise."""
        expected, predicted = plain_number(gold), plain_number(text)
        if expected is None or predicted is None:
            return None
        (a, a_decimal), (b, b_decimal) = expected, predicted
        equal = a == b or (
            (a_decimal or b_decimal)
            and abs(a - b) <= Fraction(self.config.rel_tol) * max(abs(a), abs(b))
        )
        if equal:
            return self._verdict(Outcome("AC"))
        return self._verdict(Outcome("WA", f"answered {text.strip()[:80]!r}"))

    def _verdict(self, outcome: Outcome) -> Verdict:
        if outcome.status == "AC":
            return Verdict(status=VerdictStatus.AC, reward=self.config.correct_reward)
        if outcome.status == "WA":
            reward = self.config.wrong_reward
            return Verdict(status=VerdictStatus.WA, reward=reward, message=outcome.message)
        return Verdict(status=VerdictStatus.SE, reward=None, message=outcome.message)


def make_math_judge(config: MathJudgeConfig, context: BuildContext) -> MathJudge:
    """Builds the math judge from its config."""
    return MathJudge(config)
