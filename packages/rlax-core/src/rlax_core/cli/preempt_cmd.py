"""``rlax preempt RUN_DIR NAME``: reclaim a worker or a verifier the way a scheduler does.

Workers and verifiers are the roles that run on preemptible capacity. SIGTERM to the
process group, a grace period in which it finishes or hands back its leases and exits,
then SIGKILL if it has not. The note written first (``RUN_DIR/preempting/<name>``)
tells the local launcher that the exit is a preemption, not a crash; the launcher starts
the process again and the run carries on.
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
        help="preempt a worker or verifier of a locally launched run (SIGTERM, grace, SIGKILL)",
        description="Reclaim a worker or verifier of a run started with launcher: {type: "
        "local}: SIGTERM, wait --grace seconds, then SIGKILL. The launcher restarts it.",
    )
    sub.add_argument("run_dir", type=Path, help="the run directory")
    sub.add_argument(
        "worker", metavar="name", help="the worker's or verifier's name, as `rlax status` lists it"
    )
    sub.add_argument(
        "--grace",
        type=float,
        default=30.0,
        help="seconds between SIGTERM and SIGKILL (default 30)",
    )
    sub.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Preempts the process; prints how it ended."""
    if args.grace < 0:
        raise ConfigError(f"--grace must be ≥ 0 seconds, got {args.grace}")
    how = preempt(args.run_dir, args.worker, grace_s=args.grace)
    print(f"preempted {args.worker}: {how}", file=sys.stderr)
    return 0


PREEMPTIBLE = ("worker", "verifier")


def preempt(run_dir: Path, name: str, *, grace_s: float) -> str:
    """SIGTERM, ``grace_s``, SIGKILL to one worker or verifier; returns how it ended.

    Raises:
        ConfigError: no such run directory or process, or not a preemptible one (the
            message lists those).
        RlaxError: the process is not running right now.
    """
    table = read_table(run_dir)
    entry = table.entry(name)
    names = [p.name for p in table.processes if p.role in PREEMPTIBLE]
    if entry is None or entry.role not in PREEMPTIBLE:
        what = (
            f"is the {entry.role}, not a worker or verifier"
            if entry is not None
            else "is not a process of this run"
        )
        raise ConfigError(
            f"{name!r} {what} in {run_dir}; workers and verifiers: {', '.join(names) or 'none'}"
        )
    if entry.state == "running" and not pid_alive(entry.pid):
        raise RlaxError(
            f"{entry.role} {name} has exited (pid {entry.pid}) though the table still says "
            f"running: the run is ending or its launcher restarts it; `rlax status {run_dir}` "
            "shows when it runs again"
        )
    if entry.state != "running" or entry.pgid is None:
        raise RlaxError(
            f"{entry.role} {name} is not running now (state {entry.state}); "
            f"`rlax status {run_dir}` shows when it is"
        )
    if os.getpgid(entry.pid) != entry.pgid:
        raise RlaxError(f"pid {entry.pid} is no longer {entry.role} {name}; the table is stale")
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
