"""``rlax preempt RUN_DIR WORKER``: reclaim a worker the way a scheduler does.

SIGTERM to the worker's process group, a grace period in which it finishes or hands back
its leases and exits, then SIGKILL if it has not. The note written first
(``RUN_DIR/preempting/<name>``) tells the local launcher that the exit is a preemption,
not a crash; the launcher starts the worker again and the run carries on.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

from rlax_core.errors import ConfigError, RlaxError
from rlax_core.run_dir.process_table import mark_preempting, pid_alive, read_table


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Adds the ``preempt`` subcommand."""
    sub = commands.add_parser(
        "preempt",
        help="preempt a worker of a locally launched run (SIGTERM, grace, SIGKILL)",
        description="Reclaim a worker of a run started with launcher: {type: local}: "
        "SIGTERM, wait --grace seconds, then SIGKILL. The launcher restarts it.",
    )
    sub.add_argument("run_dir", type=Path, help="the run directory")
    sub.add_argument("worker", help="the worker's name, as `rlax status RUN_DIR` lists it")
    sub.add_argument(
        "--grace",
        type=float,
        default=30.0,
        help="seconds between SIGTERM and SIGKILL (default 30)",
    )
    sub.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Preempts the worker; prints how it ended."""
    if args.grace < 0:
        raise ConfigError(f"--grace must be ≥ 0 seconds, got {args.grace}")
    how = preempt(args.run_dir, args.worker, grace_s=args.grace)
    print(f"preempted {args.worker}: {how}", file=sys.stderr)
    return 0


def preempt(run_dir: Path, name: str, *, grace_s: float) -> str:
    """SIGTERM, ``grace_s``, SIGKILL to one worker; returns how it ended.

    Raises:
        ConfigError: no such run directory or worker (the message lists the workers).
        RlaxError: the worker is not running right now.
    """
    table = read_table(run_dir)
    entry = table.entry(name)
    workers = [p.name for p in table.processes if p.role == "worker"]
    if entry is None or entry.role != "worker":
        what = "is not a worker" if entry is not None else "is not a process of this run"
        raise ConfigError(f"{name!r} {what} in {run_dir}; workers: {', '.join(workers) or 'none'}")
    if entry.state != "running" or not pid_alive(entry.pid) or entry.pgid is None:
        raise RlaxError(
            f"worker {name} is not running now (state {entry.state}); "
            f"`rlax status {run_dir}` shows when it is"
        )
    if os.getpgid(entry.pid) != entry.pgid:
        raise RlaxError(f"pid {entry.pid} is no longer worker {name}; the table is stale")
    mark_preempting(run_dir, name)
    os.killpg(entry.pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not pid_alive(entry.pid):
            return "exited within the grace period"
        time.sleep(0.05)
    try:
        os.killpg(entry.pgid, signal.SIGKILL)
    except ProcessLookupError:
        return "exited within the grace period"
    return f"killed after the {grace_s:g} s grace period"
