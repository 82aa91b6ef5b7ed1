"""``rlax bench SUITE``: run a benchmark suite and print each figure beside its baseline."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from rlax_core.bench.measure import Bench
from rlax_core.bench.runner import find_benchmarks_dir, list_suites, run_suite


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Adds the ``bench`` subcommand."""
    sub = commands.add_parser(
        "bench",
        help="run a benchmark suite (figures beside same-run baselines)",
        description="Run benchmarks/<SUITE>.py; every figure is reported beside a baseline "
        "measured in the same run, with their ratio.",
    )
    sub.add_argument("suite", nargs="?", help="suite name (see --list)")
    sub.add_argument("--list", action="store_true", help="list the suites")
    sub.add_argument("--quick", action="store_true", help="small sizes, one repeat")
    sub.add_argument("--out", type=Path, help="results JSON (default: bench-results/...)")
    sub.add_argument("--dir", type=Path, help="the benchmarks folder (default: found above cwd)")
    sub.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Lists suites, or runs one and prints its table."""
    folder = find_benchmarks_dir(args.dir)
    console = Console(width=None if sys.stdout.isatty() else 160)
    if args.list or not args.suite:
        for name, doc in list_suites(folder).items():
            console.print(f"[bold]{name}[/bold]  {doc}")
        return 0
    bench, out = run_suite(args.suite, folder, quick=args.quick, out=args.out)
    console.print(render_table(args.suite, bench))
    console.print(f"results: {out}")
    return 0


def render_table(suite: str, bench: Bench) -> Table:
    """The report table: figure, baseline, and how many times better the subject is."""
    table = Table(title=f"rlax bench {suite}")
    for column in ("measurement", "rlax", "baseline", "baseline is", "ratio"):
        table.add_column(
            column, justify="right" if column in ("rlax", "baseline", "ratio") else "left"
        )
    for c in bench.results:
        subject = f"{_fmt(c.subject)} {c.unit}"
        if c.subject_label != "rlax":
            subject += f" ({c.subject_label})"
        table.add_row(
            c.name, subject, f"{_fmt(c.baseline)} {c.unit}", c.baseline_label, f"{c.speedup:.2f}×"
        )
    table.caption = "ratio = how many times faster than the baseline (>1: faster)"
    return table


def _fmt(value: float) -> str:
    if value == 0 or 0.01 <= abs(value) < 10_000:
        return f"{value:.3g}" if abs(value) < 100 else f"{value:,.0f}"
    return f"{value:.3g}"
