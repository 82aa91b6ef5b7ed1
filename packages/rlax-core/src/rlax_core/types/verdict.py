"""Verdicts (what a judge decides) and execution results (what a sandbox observed).

A sandbox backend only runs code and reports raw :class:`ExecutionResult` values; a
judge, outside the sandbox, turns them into a :class:`Verdict`. Expected outputs never
enter the sandbox.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field

from rlax_core.types.record import Record


class VerdictStatus(StrEnum):
    """The outcome of judging one completion (or one test case of it)."""

    AC = "AC"  # accepted
    WA = "WA"  # wrong answer
    TLE = "TLE"  # time limit exceeded
    MLE = "MLE"  # memory limit exceeded
    RE = "RE"  # runtime error
    CE = "CE"  # compile error (or no code found)
    OLE = "OLE"  # output limit exceeded
    SE = "SE"  # sandbox / infrastructure error: retried and reported, never a silent 0
    IE = "IE"  # invalid input: the problem or completion cannot be judged as given

    @property
    def judged(self) -> bool:
        """Whether this is a judgement of the completion (not SE or IE, which have none)."""
        return self not in (VerdictStatus.SE, VerdictStatus.IE)


class TestOutcome(Record):
    """The verdict of one test case."""

    __test__ = False  # not a pytest test class

    verdict: VerdictStatus = Field(description="Outcome of this test case.")
    time_s: float | None = Field(default=None, ge=0, description="Wall time of the run.")
    memory_mb: float | None = Field(default=None, ge=0, description="Peak resident memory.")
    message: str = Field(default="", description="Short human-readable detail.")


class Verdict(Record):
    """The judgement of one completion of one problem.

    SE and IE verdicts have no reward (``None``): the sandbox failed, or the problem or
    completion could not be judged as given, so nothing is known about the completion,
    and the RL loop must leave it out of the loss rather than train on a 0. SE is worth
    retrying (the infrastructure may recover); IE is not (the input stays invalid).
    """

    status: VerdictStatus = Field(description="Overall outcome.")
    reward: float | None = Field(
        description="Scalar reward given to the RL loop; None for SE (no judgement)."
    )
    tests: tuple[TestOutcome, ...] = Field(default=(), description="Per-test outcomes, if any.")
    message: str = Field(default="", description="Short human-readable detail.")


class ExecutionResult(Record):
    """What a sandbox observed running one program on one input. No judgement.

    Output streams are capped; ``*_truncated`` says whether the cap was hit. stdout and
    the channel keep their beginning (a judge compares them); stderr keeps its end (what
    holds the error), and only stdout or the channel over its cap is an output-limit
    failure. ``channel``
    is what the program wrote to its result channel (file descriptor 3, when the program
    asked for one): the harness of function-call and assert tests reports there, out of
    reach of the code under test. A C++ program that failed to compile is reported once
    per input with ``stage="compile"`` and the compiler's output.
    """

    stage: Literal["compile", "run"] = Field(
        default="run", description="Which step this result describes: compiling or running."
    )
    stdout: str = Field(default="", description="Captured stdout (UTF-8, invalid bytes replaced).")
    stdout_truncated: bool = Field(default=False, description="stdout exceeded its byte cap.")
    stderr: str = Field(default="", description="Captured stderr (UTF-8, invalid bytes replaced).")
    stderr_truncated: bool = Field(default=False, description="stderr exceeded its byte cap.")
    exit_code: int | None = Field(default=None, description="Exit status; None if signalled.")
    signal: int | None = Field(default=None, description="Terminating signal number, if any.")
    wall_s: float = Field(default=0.0, ge=0, description="Wall-clock time.")
    cpu_s: float = Field(default=0.0, ge=0, description="User + system CPU time.")
    peak_memory_mb: float = Field(default=0.0, ge=0, description="Peak resident memory.")
    timed_out: bool = Field(default=False, description="Killed from outside at the wall limit.")
    channel: str | None = Field(
        default=None, description="Bytes written to the result channel (fd 3), if one was open."
    )
    channel_truncated: bool = Field(
        default=False, description="The result channel exceeded its byte cap."
    )
    sandbox_error: str | None = Field(
        default=None, description="Set when the sandbox itself failed (the program's fault or not)."
    )
