"""A child started with signal_when_parent_dies ends when its parent is SIGKILLed."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from rlax_core.run_dir.process_table import pid_alive

# The parent starts a long-sleeping child that asks to be SIGTERMed when the parent dies,
# prints the child's pid, then waits to be killed.
PARENT = """
import os, subprocess, sys, time
from rlax_core.child_processes import signal_when_parent_dies
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                         preexec_fn=signal_when_parent_dies(os.getpid()))
print(child.pid, flush=True)
time.sleep(600)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux only")
def test_the_child_is_signalled_when_its_parent_is_killed() -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    child_pid = int(parent.stdout.readline())
    assert pid_alive(child_pid)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 30  # a bound on a hang; the kernel acts at once
    while pid_alive(child_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(child_pid)
