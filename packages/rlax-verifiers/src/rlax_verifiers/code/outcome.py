"""Turning what the sandbox observed into a test verdict. Order decides ties:

SE (the sandbox failed) → CE (a compile step failed, or Python could not compile the
source) → TLE (CPU time over the time limit, killed at the wall limit, which the judge
sets with some slack, or the CPU rlimit's SIGXCPU) → OLE (an output
stream passed its cap) → MLE (a failed allocation or the memory cap) → RE (any other
non-zero exit or signal) → the test type's own check (AC or WA).
"""

from __future__ import annotations

import json
import re
import signal
from typing import Any, NamedTuple

from rlax_core.types.verdict import ExecutionResult, TestOutcome, VerdictStatus
from rlax_verifiers.code.compare import output_matches, values_equal

_PY_COMPILE_ERROR = re.compile(r"^(SyntaxError|IndentationError|TabError)\b", re.MULTILINE)
_OUT_OF_MEMORY = re.compile(r"MemoryError|std::bad_alloc|Cannot allocate memory")


class Limits(NamedTuple):
    """The problem's limits, against which a run is judged."""

    time_s: float
    memory_mb: int


def _outcome(verdict: VerdictStatus, result: ExecutionResult, message: str = "") -> TestOutcome:
    return TestOutcome(
        verdict=verdict,
        time_s=round(result.wall_s, 6),
        memory_mb=round(result.peak_memory_mb, 3),
        message=message[:300],
    )


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _compiler_error(text: str) -> str:
    for line in text.splitlines():
        if "error" in line:
            return line.strip()
    return _last_line(text)


def failure(result: ExecutionResult, limits: Limits) -> TestOutcome | None:
    """The verdict of a run that did not finish normally, or None if it did."""
    memory_limit_mb = limits.memory_mb
    if result.sandbox_error:
        return _outcome(VerdictStatus.SE, result, result.sandbox_error)
    if result.stage == "compile":
        detail = "compile time limit" if result.timed_out else _compiler_error(result.stderr)
        return _outcome(VerdictStatus.CE, result, detail or "compilation failed")
    if result.timed_out or result.signal == signal.SIGXCPU or result.cpu_s > limits.time_s:
        return _outcome(VerdictStatus.TLE, result, "time limit exceeded")
    if result.stdout_truncated or result.channel_truncated:  # stderr is not compared
        return _outcome(VerdictStatus.OLE, result, "output limit exceeded")
    if result.exit_code == 0 and result.signal is None:
        return None
    if _OUT_OF_MEMORY.search(result.stderr[-2000:]) or (
        result.signal == signal.SIGKILL and result.peak_memory_mb >= memory_limit_mb
    ):
        return _outcome(VerdictStatus.MLE, result, "memory limit exceeded")
    if result.exit_code == 1 and _PY_COMPILE_ERROR.search(result.stderr[-2000:]):
        return _outcome(VerdictStatus.CE, result, _last_line(result.stderr))
    if result.signal is not None:
        return _outcome(VerdictStatus.RE, result, f"killed by signal {result.signal}")
    return _outcome(VerdictStatus.RE, result, _last_line(result.stderr) or "non-zero exit")


def stdio_outcome(
    result: ExecutionResult, expected: str, float_tolerance: float | None, limits: Limits
) -> TestOutcome:
    """Verdict of a stdin/stdout test."""
    failed = failure(result, limits)
    if failed is not None:
        return failed
    if output_matches(result.stdout, expected, float_tolerance):
        return _outcome(VerdictStatus.AC, result)
    return _outcome(VerdictStatus.WA, result, "wrong output")


def _channel_message(result: ExecutionResult) -> dict[str, Any] | None:
    if not result.channel:
        return None
    try:
        message = json.loads(result.channel)
    except ValueError:
        return None
    return message if isinstance(message, dict) else None


def call_outcome(
    result: ExecutionResult, expected: Any, float_tolerance: float | None, limits: Limits
) -> TestOutcome:
    """Verdict of a function-call test: the return value came through the channel."""
    failed = failure(result, limits)
    if failed is not None:
        return failed
    message = _channel_message(result)
    if message is None:
        return _outcome(VerdictStatus.RE, result, "the program ended before returning a result")
    if not message.get("ok"):
        verdict = VerdictStatus.WA if message.get("wrong_type") else VerdictStatus.RE
        if verdict is VerdictStatus.RE and _OUT_OF_MEMORY.search(str(message.get("error"))):
            verdict = VerdictStatus.MLE
        return _outcome(verdict, result, str(message.get("error", "")))
    if values_equal(message.get("result"), expected, float_tolerance):
        return _outcome(VerdictStatus.AC, result)
    return _outcome(VerdictStatus.WA, result, "wrong return value")


def assert_outcome(result: ExecutionResult, nonce: str, limits: Limits) -> TestOutcome:
    """Verdict of an assert test: AC only if the harness wrote this run's nonce."""
    failed = failure(result, limits)
    if failed is not None:
        return failed
    message = _channel_message(result)
    if message is not None and message.get("ok") is True:
        if message.get("nonce") == nonce:
            return _outcome(VerdictStatus.AC, result)
        return _outcome(VerdictStatus.WA, result, "the result channel held a wrong nonce")
    if message is None:
        return _outcome(VerdictStatus.RE, result, "the program exited before the tests finished")
    verdict = VerdictStatus.WA if message.get("assertion") else VerdictStatus.RE
    if verdict is VerdictStatus.RE and _OUT_OF_MEMORY.search(str(message.get("error"))):
        verdict = VerdictStatus.MLE
    return _outcome(verdict, result, str(message.get("error", "")))
