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
        default=1 << 20, gt=0, description="Cap on captured stdout and on stderr, each."
    )


class SandboxBackend(ABC):
    """Runs untrusted programs in isolation and reports raw results. Never judges.

    Guarantees: each run starts from a clean state, cannot reach the network or the
    host's files, is killed from outside at its wall limit, and leaves nothing running.
    An infrastructure failure is reported in ``ExecutionResult.sandbox_error``, never
    as a program failure.
    """

    @abstractmethod
    def run(self, program: Program, stdin_cases: Sequence[str]) -> list[ExecutionResult]:
        """Runs ``program`` once per stdin input; results in input order."""

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
