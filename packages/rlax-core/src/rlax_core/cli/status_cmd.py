"""``rlax status RUN_DIR``: how far the run got, then each process of it, its policy
version and its throughput.

The rows come from :func:`rlax_core.run_dir.status.collect_status`, the run's progress
(finished, running or stopped, at which step) from
:func:`rlax_core.run_dir.status.run_progress`; this module prints them.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.console import Console
from rich.table import Table

from rlax_core.run_dir.process_table import pid_alive
from rlax_core.run_dir.status import ProcessRow, collect_status, describe_run, run_progress


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Adds the ``status`` subcommand."""
    sub = commands.add_parser(
        "status",
        help="show each process of a run: pid, restarts, policy version, throughput",
        description="Read RUN_DIR's process table (local launcher) and status files.",
    )
    sub.add_argument("run_dir", type=Path, help="the run directory")
    sub.add_argument("--json", action="store_true", help="print the rows as JSON")
    sub.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Prints the status table."""
    rows, table = collect_status(args.run_dir)
    if args.json:
        print(json.dumps([row.__dict__ for row in rows], indent=1))
        return 0
    console = Console(width=140)
    progress = run_progress(args.run_dir)
    if progress is not None:
        running = any(row.alive for row in rows)
        for line in describe_run(args.run_dir, progress, running=running):
            console.print(line, highlight=False, markup=False)
    if table is not None:
        alive = "running" if pid_alive(table.launcher_pid) else "not running"
        console.print(f"launcher pid {table.launcher_pid} ({alive})")
    containers = [f"{row.name} {row.container}" for row in rows if row.container]
    if containers:  # the docker launcher's: what `docker logs` and `docker exec` take
        console.print(f"containers: {', '.join(containers)}", highlight=False, markup=False)
    console.print(render(rows))
    return 0


def render(rows: list[ProcessRow]) -> Table:
    """The rows as a rich table."""
    table = Table(box=None, header_style="bold")
    for column in (
        "name",
        "role",
        "pid",
        "alive",
        "state",
        "restarts",
        "crash/preempt",
        "version",
        "step",
        "throughput",
        "backlog",
        "engine / load",
        "updated",
    ):
        table.add_column(column)
    for row in rows:
        throughput = ", ".join(
            f"{v:.1f} {k.replace('_per_s', '/s')}" for k, v in row.throughput.items()
        )
        table.add_row(
            row.name,
            row.role,
            _text(row.pid),
            "yes" if row.alive else "no",
            row.state,
            str(row.restarts),
            f"{row.crashes}/{row.preemptions}",
            _text(row.policy_version),
            _text(row.step),
            throughput or "-",
            _text(row.backlog),
            _engine(row.engine) if row.engine else _load(row.load),
            "-" if row.updated_age_s is None else f"{row.updated_age_s:.0f} s ago",
        )
    return table


def _engine(engine: dict[str, float] | None) -> str:
    """A streaming worker's engine in a few words: slots, KV blocks, preemptions."""
    if not engine:
        return "-"
    return (
        f"slots {engine['running']:.0f}/{engine['slots']:.0f} "
        f"({engine['slot_occupancy']:.0%} busy), {engine['tokens_in_flight']:.0f} tokens, "
        f"KV {engine['kv_blocks_used']:.0f}/{engine['kv_blocks']:.0f}, "
        f"{engine['preemptions']:.0f} preempted"
    )


def _load(load: dict[str, int] | None) -> str:
    """A transport server's counts: what it holds now and what it refused."""
    if not load:
        return "-"
    return ", ".join(f"{name.replace('_', ' ')} {value}" for name, value in load.items())


def _text(value: object) -> str:
    return "-" if value is None else str(value)
