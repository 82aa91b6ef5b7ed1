"""Host-side checks that a sandbox left nothing behind."""

from __future__ import annotations

import os


def host_processes_of(uids: range) -> list[str]:
    """``pid uid cmdline`` of every process on this host running as one of ``uids``."""
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
