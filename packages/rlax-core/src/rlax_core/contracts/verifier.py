"""Verifiers: judges that decide rewards, and sandbox backends that only run code.

The split keeps rewards honest: a backend runs untrusted code and reports what it
observed (:class:`ExecutionResult`); a judge, outside the sandbox, compares that with
what was expected and decides the :class:`Verdict`. Expected outputs never enter the
sandbox.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import Field

from rlax_core.types.record import Record
from rlax_core.types.verdict import ExecutionResult, Verdict


class Program(Record):
    """Source code to run in a sandbox, with its resource limits."""

    language: Literal["python", "cpp"] = Field(description="Source language.")
    source: str = Field(description="The program text.")
    time_limit_s: float = Field(default=2.0, gt=0, description="Wall-clock limit per run.")
    memory_limit_mb: int = Field(default=256, gt=0, description="Memory limit per run.")
    output_limit_bytes: int = Field(
        default=1 << 20,
        gt=0,
        description="Cap on captured stdout (what is compared: past it the run is killed) and "
        "on stderr (not compared: its tail is kept and the run goes on), each.",
    )
    result_channel: bool = Field(
        default=False,
        description="Open file descriptor 3 as a write-only result channel; what the program "
        "writes there comes back in ExecutionResult.channel.",
    )


class RunRequest(Record):
    """One program and the stdin inputs to run it on (once per input)."""

    program: Program = Field(description="What to run.")
    stdin_cases: tuple[str, ...] = Field(description="One run per input, in order.")


class SandboxBackend(ABC):
    """Runs untrusted programs in isolation and reports raw results. Never judges.

    Guarantees: each run starts from a clean state, cannot reach the network or the
    host's files, is killed from outside at its wall limit, and leaves nothing running.
    An infrastructure failure is reported in ``ExecutionResult.sandbox_error``, never
    as a program failure. Runs of one batch may execute concurrently, never in the
    same process.
    """

    @abstractmethod
    def run_batch(self, requests: Sequence[RunRequest]) -> list[list[ExecutionResult]]:
        """Runs every request; ``result[i][j]`` is request ``i`` on its input ``j``.

        A backend may spread the runs over workers, containers or invocations; a C++
        program is compiled once per request.
        """

    def run(self, program: Program, stdin_cases: Sequence[str]) -> list[ExecutionResult]:
        """Runs ``program`` once per stdin input; results in input order."""
        return self.run_batch([RunRequest(program=program, stdin_cases=tuple(stdin_cases))])[0]

    def close(self) -> None:  # noqa: B027  (optional hook with a default)
        """Releases pooled processes or containers; idempotent."""


class Judge(ABC):
    """Decides the verdict and reward of completions of problems.

    A judge is pure with respect to the run: the same (problem, completion) always gets
    the same verdict, except for SE verdicts, which report infrastructure failures.
    """

    @abstractmethod
    def judge(
        self, problems: Sequence[Mapping[str, Any]], completions: Sequence[str]
    ) -> list[Verdict]:
        """Judges ``completions[i]`` as an answer to ``problems[i]``; results in order."""

    def close(self) -> None:  # noqa: B027
        """Releases resources (e.g. a sandbox pool); idempotent."""
