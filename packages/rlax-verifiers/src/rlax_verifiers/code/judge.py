"""The ``code`` judge: runs a completion's program on a problem's tests and decides.

The sandbox only runs programs; expected outputs and return values stay here. Tests
whose run hit a sandbox error are run again (``se_retries`` times); a test still SE
after that makes the verdict SE, with no reward, never a silent 0.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rlax_core.contracts.verifier import Judge, Program, RunRequest, SandboxBackend
from rlax_core.errors import RlaxError
from rlax_core.plugins.registry import BuildContext
from rlax_core.types.verdict import ExecutionResult, TestOutcome, Verdict, VerdictStatus
from rlax_verifiers.code import outcome
from rlax_verifiers.code.extract import extract_code
from rlax_verifiers.code.harness import assert_program, call_input, function_call_program
from rlax_verifiers.code.problem import CodeProblem, ProblemError, parse_problem
from rlax_verifiers.sandbox.configured import configured_sandbox


class CodeJudgeConfig(BaseModel):
    """Code: runs the completion's last fenced block on the problem's tests in a sandbox."""

    model_config = ConfigDict(extra="forbid")

    reward_mode: Literal["all_or_nothing", "fraction"] = Field(
        default="all_or_nothing",
        description="all_or_nothing: 1 if every test passes, else 0; fraction: share passed.",
    )
    se_retries: int = Field(
        default=2, ge=0, description="How often a test with a sandbox error is run again."
    )
    output_limit_bytes: int = Field(
        default=1 << 20, ge=1024, description="Cap on a test's stdout and on its stderr (OLE)."
    )
    wall_time_factor: float = Field(
        default=1.5,
        ge=1.0,
        description="A run is killed at time_limit_s × this + wall_time_slack_s of wall time; "
        "TLE is CPU time over time_limit_s, or that kill (busy neighbours cost no verdict).",
    )
    wall_time_slack_s: float = Field(
        default=0.5, ge=0.0, description="Added to the wall-clock limit (see wall_time_factor)."
    )


@dataclass
class _Case:
    """One test case of one problem, and what the judge needs to decide it."""

    problem: int
    stdin: str
    expected: Any = None
    outcome: TestOutcome | None = None


@dataclass
class _Plan:
    """A problem's program and its cases (or the verdict it already has)."""

    problem: CodeProblem | None
    program: Program | None = None
    cases: list[_Case] = field(default_factory=list)
    verdict: Verdict | None = None


class CodeJudge(Judge):
    """Judges ``{"kind": "code", ...}`` problems (see :mod:`rlax_verifiers.code.problem`)."""

    def __init__(self, sandbox: SandboxBackend, config: CodeJudgeConfig | None = None) -> None:
        self.sandbox = sandbox
        self.config = config or CodeJudgeConfig()

    def judge(
        self, problems: Sequence[Mapping[str, Any]], completions: Sequence[str]
    ) -> list[Verdict]:
        """Judges each completion; all programs of the call go to the sandbox as one batch."""
        if len(problems) != len(completions):
            raise ValueError(f"{len(problems)} problems but {len(completions)} completions")
        plans = [
            self._plan(i, p, c) for i, (p, c) in enumerate(zip(problems, completions, strict=True))
        ]
        pending = [case for plan in plans for case in plan.cases]
        for _attempt in range(self.config.se_retries + 1):
            if not pending:
                break
            self._run(plans, pending)
            pending = [c for c in pending if c.outcome and c.outcome.verdict is VerdictStatus.SE]
        return [plan.verdict or self._decide(plan) for plan in plans]

    def close(self) -> None:
        """Closes the sandbox."""
        self.sandbox.close()

    def _plan(self, index: int, raw: Mapping[str, Any], completion: str) -> _Plan:
        try:
            problem = parse_problem(raw)
        except ProblemError as exc:  # the problem is invalid input, not a sandbox failure
            return _Plan(
                None, verdict=Verdict(status=VerdictStatus.IE, reward=None, message=str(exc))
            )
        code = extract_code(completion)
        if not code.strip():
            return _Plan(
                problem,
                verdict=Verdict(status=VerdictStatus.CE, reward=0.0, message="no code found"),
            )
        source = problem.code_prefix + ("\n" if problem.code_prefix else "") + code
        tests = problem.tests
        if tests.type == "stdin_stdout":
            cases = [_Case(index, c.input, c.output) for c in tests.cases]
        elif tests.type == "function_call":
            source = function_call_program(source, tests.fn_name)
            cases = [_Case(index, call_input(c.args), c.expected) for c in tests.cases]
        else:
            try:
                source = assert_program(source, tests.code)
            except SyntaxError as exc:
                message = f"the problem's assert tests are not valid Python: {exc}"
                return _Plan(
                    problem, verdict=Verdict(status=VerdictStatus.IE, reward=None, message=message)
                )
            cases = [_Case(index, "")]
        program = Program(
            language=problem.language,
            source=source,
            time_limit_s=problem.time_limit_s * self.config.wall_time_factor
            + self.config.wall_time_slack_s,
            memory_limit_mb=problem.memory_limit_mb,
            output_limit_bytes=self.config.output_limit_bytes,
            result_channel=tests.type != "stdin_stdout",
        )
        return _Plan(problem, program, cases)

    def _run(self, plans: list[_Plan], cases: list[_Case]) -> None:
        by_problem: dict[int, list[_Case]] = {}
        for case in cases:
            if plans[case.problem].problem.tests.type == "assert":  # type: ignore[union-attr]
                case.stdin = secrets.token_hex(16)  # a fresh nonce for every run
            by_problem.setdefault(case.problem, []).append(case)
        requests = [
            RunRequest(program=plans[i].program, stdin_cases=tuple(c.stdin for c in group))  # type: ignore[arg-type]
            for i, group in by_problem.items()
        ]
        try:
            rows = self.sandbox.run_batch(requests)
        except RlaxError:
            raise  # the sandbox cannot work here at all (e.g. no engine): say so, once
        except Exception as exc:  # a backend bug or outage must not lose the batch
            error = ExecutionResult(sandbox_error=f"{type(exc).__name__}: {exc}")
            rows = [[error] * len(r.stdin_cases) for r in requests]
        for group, row in zip(by_problem.values(), rows, strict=True):
            for case, result in zip(group, row, strict=True):
                case.outcome = self._decide_case(plans[case.problem].problem, case, result)  # type: ignore[arg-type]

    @staticmethod
    def _decide_case(problem: CodeProblem, case: _Case, result: ExecutionResult) -> TestOutcome:
        tests = problem.tests
        limits = outcome.Limits(problem.time_limit_s, problem.memory_limit_mb)
        if tests.type == "stdin_stdout":
            return outcome.stdio_outcome(result, case.expected, tests.float_tolerance, limits)
        if tests.type == "function_call":
            return outcome.call_outcome(result, case.expected, tests.float_tolerance, limits)
        return outcome.assert_outcome(result, case.stdin, limits)

    def _decide(self, plan: _Plan) -> Verdict:
        tests = tuple(c.outcome for c in plan.cases if c.outcome is not None)
        failing = [t for t in tests if t.verdict is not VerdictStatus.AC]
        if any(t.verdict is VerdictStatus.SE for t in tests):
            message = next(t.message for t in tests if t.verdict is VerdictStatus.SE)
            return Verdict(status=VerdictStatus.SE, reward=None, tests=tests, message=message)
        passed = len(tests) - len(failing)
        if self.config.reward_mode == "fraction":
            reward = passed / len(tests) if tests else 0.0
        else:
            reward = 1.0 if not failing else 0.0
        status = failing[0].verdict if failing else VerdictStatus.AC
        message = failing[0].message if failing else f"{passed}/{len(tests)} tests passed"
        return Verdict(status=status, reward=reward, tests=tests, message=message)


def make_code_judge(config: CodeJudgeConfig, context: BuildContext) -> CodeJudge:
    """Builds the code judge with the configured sandbox (the local one if none is set)."""
    return CodeJudge(configured_sandbox(context), config)
