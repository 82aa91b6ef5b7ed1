"""Host-side checks that a sandbox left nothing behind."""

from __future__ import annotations

import os
import time


def host_processes_of(uids: range, *, grace_s: float = 5.0) -> list[str]:
    """``pid uid cmdline`` of every process on this host running as one of ``uids``,
    once none is left or ``grace_s`` has passed: a process sent SIGKILL is gone only
    once the kernel has torn it down, which on a busy machine takes a moment (a process
    still there after the grace survived)."""
    deadline = time.monotonic() + grace_s
    while (found := _processes_of(uids)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return found


def _processes_of(uids: range) -> list[str]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            uid = os.stat(f"/proc/{entry}").st_uid
            if uid in uids:
                with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                    command = cmdline.read().replace(b"\0", b" ").decode(errors="replace")
                found.append(f"{entry} {uid} {command}")
        except OSError:
            continue
    return found
