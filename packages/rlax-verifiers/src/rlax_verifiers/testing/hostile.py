"""The hostile-input suite: programs that attack the judge, and the verdict each must get.

One table, shared by every sandbox backend: a backend's tests judge all of
:data:`HOSTILE_PROGRAMS` in one batch (:func:`judge_hostile_suite`), compare each
verdict with the required one, then check that later runs are unharmed
(:func:`judge_canaries`) and, on the host side, that nothing was left running or
written. ``{port}`` in a program is replaced by a TCP port the host listens on.
"""

from __future__ import annotations

from typing import Any

from rlax_core.contracts.verifier import Judge
from rlax_core.types.verdict import Verdict, VerdictStatus
from rlax_verifiers.testing.hostile_attacks import ATTACKS
from rlax_verifiers.testing.hostile_limits import LIMITS
from rlax_verifiers.testing.hostile_problems import CANARIES, HostileProgram, make_problems

HOSTILE_PROGRAMS: list[HostileProgram] = [*ATTACKS, *LIMITS]


def _fenced(code: str, problem: dict[str, Any]) -> str:
    language = problem.get("language", "python")
    return f"Here is my solution.\n```{language}\n{code}```\n"


def judge_hostile_suite(
    judge: Judge,
    *,
    port: int,
    programs: list[HostileProgram] | None = None,
    time_limit_s: float = 1.0,
) -> dict[str, tuple[VerdictStatus, Verdict]]:
    """Judges every hostile program in one batch: name -> (required verdict, verdict)."""
    programs = HOSTILE_PROGRAMS if programs is None else programs
    problems = make_problems(time_limit_s=time_limit_s)
    verdicts = judge.judge(
        [problems[p.problem] for p in programs],
        [_fenced(p.code.replace("{port}", str(port)), problems[p.problem]) for p in programs],
    )
    return {p.name: (p.verdict, v) for p, v in zip(programs, verdicts, strict=True)}


def judge_canaries(judge: Judge) -> list[Verdict]:
    """Judges ordinary correct programs; every verdict must be AC (later runs unharmed)."""
    problems = make_problems()
    return judge.judge(
        [problems[name] for name, _ in CANARIES],
        [_fenced(code, problems[name]) for name, code in CANARIES],
    )


def mismatches(results: dict[str, tuple[VerdictStatus, Verdict]]) -> list[str]:
    """Readable lines for every program whose verdict is not the required one."""
    return [
        f"{name}: required {required}, got {verdict.status} ({verdict.message})"
        for name, (required, verdict) in results.items()
        if verdict.status != required
    ]
