# ruff: noqa: E501  (the programs under test are kept verbatim, one statement a line)
"""The problems the hostile programs are judged on, the program record, the canaries."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

from rlax_core.types.verdict import VerdictStatus

SECRET_PREFIX = "rlax-secret-"
AC, WA, TLE, MLE, RE, CE, OLE = (
    VerdictStatus(v) for v in ("AC", "WA", "TLE", "MLE", "RE", "CE", "OLE")
)


@dataclass(frozen=True)
class HostileProgram:
    """A program, the problem it is judged on, and the verdict it must get."""

    name: str
    category: str
    problem: str
    code: str
    verdict: VerdictStatus


def program(
    name: str, category: str, problem: str, verdict: VerdictStatus, code: str
) -> HostileProgram:
    """A table row (the code's surrounding blank lines dropped)."""
    return HostileProgram(name, category, problem, code.strip("\n") + "\n", verdict)


def make_problems(
    *, time_limit_s: float = 1.0, secret: str | None = None
) -> dict[str, dict[str, Any]]:
    """The suite's problems by name; ``secret`` is an answer no program can know."""
    secret = secret or SECRET_PREFIX + secrets.token_hex(12)
    stdio = {"kind": "code", "language": "python", "time_limit_s": time_limit_s,
             "memory_limit_mb": 256}  # fmt: skip
    return {
        "double": {**stdio, "tests": {"type": "stdin_stdout",
                                      "cases": [{"input": "21\n", "output": "42\n"}]}},
        "secret": {**stdio, "tests": {"type": "stdin_stdout",
                                      "cases": [{"input": "x\n", "output": secret + "\n"}]}},
        "zero": {**stdio, "tests": {"type": "stdin_stdout", "cases": [{"input": "", "output": "0"}]}},
        # Filling memory or a disk takes a while where pages are charged to a memory cgroup
        # and the machine is busy: these get the time to hit their resource limit first.
        "double_slow": {**stdio, "time_limit_s": max(time_limit_s, 4.0),
                        "tests": {"type": "stdin_stdout", "cases": [{"input": "21\n", "output": "42\n"}]}},
        "zero_slow": {**stdio, "time_limit_s": max(time_limit_s, 4.0),
                      "tests": {"type": "stdin_stdout", "cases": [{"input": "", "output": "0"}]}},
        "add_call": {**stdio, "tests": {"type": "function_call", "fn_name": "add", "cases": [
            {"args": [1, 2], "expected": 3}, {"args": [10, -3], "expected": 7}]}},
        "add_assert": {**stdio, "tests": {"type": "assert",
                                          "code": "assert add(1, 2) == 3\nassert add(10, -3) == 7\n"}},
        "double_cpp": {**stdio, "language": "cpp", "tests": {"type": "stdin_stdout",
                                                             "cases": [{"input": "21\n", "output": "42\n"}]}},
    }  # fmt: skip


CANARY_CLEAN_SLOT = r"""
import os
mine = os.getuid()
others = []
for pid in os.listdir("/proc"):
    if pid.isdigit() and int(pid) != os.getpid() and int(pid) != os.getppid():
        try:
            if os.stat("/proc/" + pid).st_uid == mine:
                others.append(pid)
        except OSError:
            pass
leftovers = [e for d in ("/tmp", "/dev/shm", ".") for e in os.listdir(d)
             if os.stat(os.path.join(d, e)).st_uid == mine and e != "main.py"]
print(0 if not others and not leftovers else f"{others} {leftovers}")
"""

# Programs that must still get AC after the hostile ones ran: (problem, code).
CANARIES: list[tuple[str, str]] = [
    ("double", "print(int(input()) * 2)\n"),
    ("add_call", "def add(a, b):\n    return a + b\n"),
    ("add_assert", "import random, json\ndef add(a, b):\n    return a + b\n"),
    ("double_cpp", '#include <cstdio>\nint main(){int x; scanf("%d",&x); printf("%d\\n", 2*x);}\n'),
    ("zero", CANARY_CLEAN_SLOT),
]
