"""``rlax plot RUN_DIR [--out DIR]``: the run's metrics.jsonl drawn as PNG plots.

One PNG per topic, each metric against the step: reward, pass@k, loss, KL, staleness
and throughput. A topic none of whose metrics the run recorded is skipped with a note.
Needs matplotlib (``pip install rlax-core[plot]``); it draws with the Agg backend, so no
display is needed.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rlax_core.errors import RlaxError
from rlax_core.run_dir.metrics import METRICS_FILE, MetricsFileError, read_metrics

if TYPE_CHECKING:
    from matplotlib.figure import Figure


@dataclass(frozen=True)
class Plot:
    """One PNG: the metrics it draws and how.

    Attributes:
        name: the file name without ``.png``.
        title: the figure's title.
        selects: whether a metric name belongs on this plot.
        one_axes: all metrics on one axes (they share a scale); otherwise one axes each.
        fraction: the metrics are fractions: the y axis spans 0 to 1 when they fit.
        order: metrics drawn first, in this order; the rest follow by name.
    """

    name: str
    title: str
    selects: Callable[[str], bool]
    one_axes: bool
    fraction: bool = False
    order: tuple[str, ...] = ()


def _prefix(prefix: str) -> Callable[[str], bool]:
    return lambda key: key.startswith(prefix)


_STALENESS = ("staleness/max", "staleness/mean", "staleness/dropped")

PLOTS = (
    Plot("reward", "Reward", lambda key: key == "reward/mean", one_axes=True),
    Plot("pass_at_k", "Held-out pass@k", _prefix("eval/pass@"), one_axes=True, fraction=True),
    Plot("loss", "Loss", _prefix("loss/"), one_axes=False),
    Plot("kl", "KL", _prefix("kl/"), one_axes=False),
    Plot("staleness", "Staleness", _STALENESS.__contains__, one_axes=False, order=_STALENESS),
    Plot("throughput", "Throughput", _prefix("throughput/"), one_axes=False),
)


def add_parser(commands: argparse._SubParsersAction) -> None:
    """Adds the ``plot`` subcommand."""
    sub = commands.add_parser(
        "plot",
        help="draw a run's metrics as PNG plots",
        description="Read RUN_DIR/metrics.jsonl and write PNG plots of reward, pass@k, loss, "
        "KL, staleness and throughput against the step.",
    )
    sub.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="the run directory")
    sub.add_argument("--out", type=Path, help="where the PNGs go (default: RUN_DIR/plots)")
    sub.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Writes one PNG per plot that has data; exit 2 when there is nothing to draw."""
    if not args.run_dir.is_dir():
        raise MetricsFileError(f"run directory {args.run_dir} does not exist")
    rows = read_metrics(args.run_dir)
    if not rows:
        raise MetricsFileError(
            f"{args.run_dir / METRICS_FILE} holds no metrics yet: plot again after the "
            "run's first step"
        )
    figure_class = _figure_class()
    out = args.out or args.run_dir / "plots"
    out.mkdir(parents=True, exist_ok=True)
    written = 0
    for plot in PLOTS:
        series = _series(rows, plot)
        if not series:
            print(f"skipped {plot.name}.png: the run recorded none of its metrics")
            continue
        path = out / f"{plot.name}.png"
        _draw(figure_class(), plot, series).savefig(path, dpi=100)
        print(f"wrote {path}")
        written += 1
    if written == 0:
        raise MetricsFileError(
            f"{args.run_dir / METRICS_FILE} has none of the metrics rlax plot draws "
            "(reward/mean, eval/pass@*, loss/*, kl/*, staleness/*, throughput/*)"
        )
    return 0


def _figure_class() -> type[Figure]:
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise RlaxError(
            "rlax plot needs matplotlib, which is not installed: pip install rlax-core[plot]"
        ) from None
    return Figure


def _series(rows: list[dict], plot: Plot) -> dict[str, tuple[list[int], list[float]]]:
    """Metric name → (steps, values) for the plot's metrics with at least one number."""
    series: dict[str, tuple[list[int], list[float]]] = {}
    for row in rows:
        for key, value in row.items():
            if key in ("step", "time") or not plot.selects(key):
                continue
            if value is not None and not isinstance(value, int | float):
                continue  # metrics.jsonl holds numbers; anything else is not ours to draw
            steps, values = series.setdefault(key, ([], []))
            steps.append(row["step"])
            values.append(math.nan if value is None else float(value))  # null: a gap
    drawn = [key for key in series if any(math.isfinite(v) for v in series[key][1])]
    return {key: series[key] for key in sorted(drawn, key=lambda key: _rank(plot, key))}


def _rank(plot: Plot, key: str) -> tuple[int, str, int]:
    """The plot's order first, then by name, with eval/pass@2 before eval/pass@16."""
    first = plot.order.index(key) if key in plot.order else len(plot.order)
    head, _, tail = key.rpartition("@")
    return (first, head, int(tail)) if head and tail.isdigit() else (first, key, 0)


def _draw(figure: Figure, plot: Plot, series: dict[str, tuple[list[int], list[float]]]) -> Figure:
    panels = 1 if plot.one_axes else len(series)
    figure.set_size_inches(8, 3 + 2 * (panels - 1))
    axes = figure.subplots(panels, 1, sharex=True, squeeze=False)[:, 0]
    for index, (key, (steps, values)) in enumerate(series.items()):
        ax = axes[0 if plot.one_axes else index]
        # Eval metrics come every few steps: mark the points so a short run still shows them.
        marker = "o" if len(steps) <= 50 else None
        ax.plot(steps, values, marker=marker, markersize=3, label=key)
        ax.grid(alpha=0.3)
        if plot.fraction and all(0 <= v <= 1 for v in values if math.isfinite(v)):
            ax.set_ylim(-0.02, 1.02)
        if plot.one_axes:
            ax.legend(loc="best")
        else:
            ax.set_ylabel(key, fontsize=8)
    axes[-1].set_xlabel("step")
    figure.suptitle(plot.title)
    figure.tight_layout()
    return figure
