"""The native JSONL format of code problems, validated.

::

    {"kind": "code", "language": "python" | "cpp",
     "tests": {"type": "stdin_stdout", "cases": [{"input": "...", "output": "..."}]},
     "time_limit_s": 2, "memory_limit_mb": 256}
    {"kind": "code", "language": "python",
     "tests": {"type": "function_call", "fn_name": "f",
               "cases": [{"args": [...], "expected": ...}]}}
    {"kind": "code", "language": "python", "tests": {"type": "assert", "code": "assert f(1) == 2"}}

``float_tolerance`` (stdin_stdout and function_call) turns on numeric comparison with
that absolute-or-relative tolerance; without it, outputs compare exactly (after
whitespace normalisation). ``code_prefix`` is prepended to the completion's code (e.g.
the imports of a HumanEval prompt).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class StdioCase(_Model):
    """One stdin/stdout test: the program reads ``input`` and must print ``output``."""

    input: str = Field(description="Standard input.")
    output: str = Field(description="Expected standard output.")


class StdioTests(_Model):
    """Tests that feed stdin and compare stdout, line by line."""

    type: Literal["stdin_stdout"] = Field(description="Selects stdin/stdout tests.")
    cases: tuple[StdioCase, ...] = Field(min_length=1, description="The test cases.")
    float_tolerance: float | None = Field(
        default=None, ge=0, description="Compare numbers within this tolerance."
    )


class CallCase(_Model):
    """One function-call test: ``fn_name(*args)`` must return ``expected``."""

    args: list[Any] = Field(description="Positional arguments (JSON values).")
    expected: Any = Field(description="Expected return value (JSON value).")


class CallTests(_Model):
    """Tests that call a function and compare its return value, outside the sandbox."""

    type: Literal["function_call"] = Field(description="Selects function-call tests.")
    fn_name: str = Field(
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", description="Function (or Solution method) to call."
    )
    cases: tuple[CallCase, ...] = Field(min_length=1, description="The test cases.")
    float_tolerance: float | None = Field(
        default=None, ge=0, description="Compare numbers within this tolerance."
    )


class AssertTests(_Model):
    """Assert statements run after the program, in a fresh interpreter."""

    type: Literal["assert"] = Field(description="Selects assert tests.")
    code: str = Field(min_length=1, description="Python code with the asserts.")


Tests = Annotated[StdioTests | CallTests | AssertTests, Field(discriminator="type")]


class CodeProblem(_Model):
    """A code problem in the native format."""

    kind: Literal["code"] = Field(default="code", description="Problem kind.")
    language: Literal["python", "cpp"] = Field(default="python", description="Language.")
    tests: Tests = Field(description="How the program is tested.")
    time_limit_s: float = Field(default=2.0, gt=0, le=60, description="Wall limit per test.")
    memory_limit_mb: int = Field(default=256, ge=16, le=8192, description="Memory per test.")
    code_prefix: str = Field(default="", description="Code prepended to the completion's.")
    id: Any = Field(default=None, description="Optional identifier, carried along.")

    @model_validator(mode="after")
    def _python_only_harnesses(self) -> CodeProblem:
        if self.language != "python" and self.tests.type != "stdin_stdout":
            raise ValueError(f"{self.tests.type} tests need language 'python'")
        return self


class ProblemError(ValueError):
    """A problem is not in the native format; the message says where and why."""


def parse_problem(data: Any) -> CodeProblem:
    """Validates a native code problem; raises ProblemError with a readable message."""
    if isinstance(data, CodeProblem):
        return data
    try:
        return CodeProblem.model_validate(data)
    except ValidationError as exc:
        details = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'problem'}: {e['msg']}"
            for e in exc.errors()[:3]
        )
        raise ProblemError(f"not a valid code problem ({details})") from None
