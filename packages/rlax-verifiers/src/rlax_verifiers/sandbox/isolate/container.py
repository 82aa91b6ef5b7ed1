"""The entry point inside a sandbox container (and the Lambda handler's engine).

Reads one JSON batch, ``{"requests": [...], "settings": {...}, "workers": N,
"first_uid": U}``, runs it on a pool of plain zygotes (the container is the isolation
boundary; the uid switch, rlimits and kills happen as everywhere else) and writes
``{"results": [[...], ...]}``. Started as ``python3 -I -c "...; from isolate.container
import main; main()"`` with ``/opt/rlax`` on ``sys.path``.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import sys
from pathlib import Path
from typing import Any

from . import batch
from .launch import plain_command
from .pool import Pool
from .slot import Slot

ISOLATE_DIR = Path(__file__).resolve().parent


def run_batch_here(message: dict[str, Any], work_root: Path) -> dict[str, Any]:
    """Runs a batch message on a fresh pool whose slots live under ``work_root``."""
    workers = max(1, int(message.get("workers", 1)))
    first_uid = None
    if os.geteuid() == 0:
        first_uid = message.get("first_uid") or random_uid_block()
    python = message.get("python") or sys.executable
    slots = []
    for i in range(workers):
        slot_dir = work_root / f"slot-{i}"
        slot_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(slot_dir, 0o711)

        def command(index: int, fd: int, host_dir: Path) -> list[str]:
            return plain_command(python, ISOLATE_DIR, fd)

        uid = None if first_uid is None else first_uid + i
        slots.append(Slot(i, command, slot_dir, str(slot_dir), uid, ("/tmp", "/dev/shm")))
    pool = Pool(slots)
    try:
        pool.start()
        results = batch.run_batch(pool, message["requests"], message.get("settings"))
    finally:
        pool.close()
        for i in range(workers):
            shutil.rmtree(work_root / f"slot-{i}", ignore_errors=True)
    return {"results": results}


def random_uid_block() -> int:
    """The first of 64 uids picked at random, so that pools running at the same time
    (containers, invocations) almost surely use different uids: RLIMIT_NPROC counts the
    processes of a uid across the whole machine."""
    return 100_000 + secrets.randbelow(1 << 24) * 64


def main() -> None:
    """Reads the batch from stdin, writes the results to stdout."""
    message = json.loads(sys.stdin.buffer.read())
    reply = run_batch_here(message, Path(message.get("work_root", "/sandbox")))
    sys.stdout.write(json.dumps(reply))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
