"""The hostile-input suite on the local sandbox, plus checks on the host afterwards."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlax_core.types.verdict import VerdictStatus
from rlax_verifiers.code.judge import CodeJudge
from rlax_verifiers.sandbox.local import LocalSandbox
from rlax_verifiers.testing.host_checks import host_processes_of
from rlax_verifiers.testing.hostile import (
    HOSTILE_PROGRAMS,
    judge_canaries,
    judge_hostile_suite,
    mismatches,
)

pytestmark = pytest.mark.slow
ESCAPES = ("/usr/rlax-escape", "/etc/rlax-escape", "/rlax-escape", "/root/rlax-escape")


def test_the_suite_has_at_least_40_programs_in_every_category() -> None:
    assert len(HOSTILE_PROGRAMS) >= 40
    assert len({p.name for p in HOSTILE_PROGRAMS}) == len(HOSTILE_PROGRAMS)
    categories = {p.category for p in HOSTILE_PROGRAMS}
    for wanted in ("early exit", "always equal", "harness tampering", "reading answers",
                   "output bomb", "fork bomb", "memory bomb", "disk filling", "time", "signals",
                   "daemon", "network", "credentials", "filesystem", "compile bomb",
                   "unusual but correct"):  # fmt: skip
        assert wanted in categories


def test_hostile_programs_get_their_verdicts_and_harm_nothing(
    local_sandbox: LocalSandbox, host_port: int
) -> None:
    judge = CodeJudge(local_sandbox)
    results = judge_hostile_suite(judge, port=host_port)
    assert mismatches(results) == []
    config = local_sandbox.config
    uids = range(local_sandbox.first_uid, local_sandbox.first_uid + config.workers)
    assert host_processes_of(uids) == []
    assert [p for p in ESCAPES if Path(p).exists()] == []
    canaries = judge_canaries(judge)
    assert [v.status for v in canaries] == [VerdictStatus.AC] * len(canaries), [
        v.message for v in canaries
    ]
