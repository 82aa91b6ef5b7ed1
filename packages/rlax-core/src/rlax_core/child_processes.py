"""Child processes that do not outlive their parent (for launchers and server wrappers)."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable


def signal_when_parent_dies(
    parent_pid: int, signum: signal.Signals = signal.SIGTERM
) -> Callable[[], None] | None:
    """A ``preexec_fn`` asking Linux to send the child ``signum`` when its parent dies.

    Returns None off Linux (no such request there). Pass ``os.getpid()`` of the parent.
    """
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    # Loaded here, in the parent: nothing may be imported between fork and exec.
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    pr_set_pdeathsig = 1

    def arrange() -> None:
        prctl(pr_set_pdeathsig, signum)
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os.kill(os.getpid(), signum)

    return arrange
