"""The code judge on the local sandbox: verdicts, rewards, harnesses, SE retries."""

from __future__ import annotations

from collections.abc import Sequence

from rlax_core.contracts.verifier import RunRequest, SandboxBackend
from rlax_core.types.verdict import ExecutionResult, VerdictStatus
from rlax_verifiers.code.judge import CodeJudge, CodeJudgeConfig
from rlax_verifiers.sandbox.local import LocalSandbox

DOUBLE = {
    "kind": "code",
    "tests": {
        "type": "stdin_stdout",
        "cases": [
            {"input": "1\n", "output": "2\n"},
            {"input": "2\n", "output": "4\n"},
            {"input": "5\n", "output": "10\n"},
        ],
    },
}
CALL = {
    "kind": "code",
    "tests": {
        "type": "function_call",
        "fn_name": "f",
        "float_tolerance": 1e-6,
        "cases": [{"args": [1.0], "expected": 0.3333333}, {"args": [2], "expected": [1, "a"]}],
    },
}


def test_reward_modes(local_sandbox: LocalSandbox) -> None:
    half = "x = int(input())\nprint(2 * x if x < 3 else 0)"
    strict = CodeJudge(local_sandbox).judge([DOUBLE], [half])[0]
    fraction = CodeJudge(local_sandbox, CodeJudgeConfig(reward_mode="fraction")).judge(
        [DOUBLE], [half]
    )[0]
    assert (strict.status, strict.reward) == (VerdictStatus.WA, 0.0)
    assert fraction.status == VerdictStatus.WA and abs(fraction.reward - 2 / 3) < 1e-9
    assert [t.verdict for t in fraction.tests] == [
        VerdictStatus.AC,
        VerdictStatus.AC,
        VerdictStatus.WA,
    ]


def test_function_calls_compare_outside_with_the_problems_tolerance(
    local_sandbox: LocalSandbox,
) -> None:
    good = "def f(x):\n    return x / 3 if x == 1.0 else (1, 'a')"
    verdicts = CodeJudge(local_sandbox).judge([CALL, CALL], [good, "def f(x):\n    return {1}"])
    assert verdicts[0].status == VerdictStatus.AC, verdicts[0].message
    assert verdicts[1].status == VerdictStatus.WA and "set" in verdicts[1].message


def test_no_code_and_broken_problems(local_sandbox: LocalSandbox) -> None:
    verdicts = CodeJudge(local_sandbox).judge(
        [
            DOUBLE,
            {"kind": "code"},
            {"kind": "code", "tests": {"type": "assert", "code": "assert ("}},
        ],
        ["```python\n```", "print(1)", "print(1)"],
    )
    assert [(v.status, v.reward) for v in verdicts] == [
        (VerdictStatus.CE, 0.0),
        (VerdictStatus.IE, None),  # invalid problems: not a sandbox failure, not retried
        (VerdictStatus.IE, None),
    ]
    assert "not valid Python" in verdicts[2].message


class FlakySandbox(SandboxBackend):
    """The local sandbox, except that the first ``failures`` runs report a sandbox error
    (an infrastructure failure, as a lost zygote or container would give)."""

    def __init__(self, inner: SandboxBackend, failures: int) -> None:
        self.inner, self.failures, self.calls = inner, failures, 0

    def run_batch(self, requests: Sequence[RunRequest]) -> list[list[ExecutionResult]]:
        self.calls += 1
        rows = self.inner.run_batch(requests)
        out = []
        for row in rows:
            fixed = []
            for result in row:
                if self.failures > 0:
                    self.failures -= 1
                    result = ExecutionResult(sandbox_error="zygote lost")
                fixed.append(result)
            out.append(fixed)
        return out


def test_sandbox_errors_are_retried_then_reported_without_reward(
    local_sandbox: LocalSandbox,
) -> None:
    good = "print(2 * int(input()))"
    flaky = FlakySandbox(local_sandbox, failures=2)
    (verdict,) = CodeJudge(flaky, CodeJudgeConfig(se_retries=2)).judge([DOUBLE], [good])
    assert verdict.status == VerdictStatus.AC and flaky.calls == 2  # only the 2 SE tests re-ran
    broken = FlakySandbox(local_sandbox, failures=100)
    (verdict,) = CodeJudge(broken, CodeJudgeConfig(se_retries=1)).judge([DOUBLE], [good])
    assert (verdict.status, verdict.reward, broken.calls) == (VerdictStatus.SE, None, 2)
    assert verdict.message == "zygote lost"
