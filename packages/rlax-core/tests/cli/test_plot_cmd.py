"""``rlax plot RUN_DIR``: PNGs from a run's metrics.jsonl, and its refusals."""

from __future__ import annotations

import math
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from rlax_core.cli.main import main
from rlax_core.cli.plot_cmd import PLOTS, _series
from rlax_core.run_dir.metrics import METRICS_FILE, MetricsLog

ALL_PLOTS = ("reward", "pass_at_k", "loss", "kl", "staleness", "throughput")


def _write_run(run_dir: Path, steps: int = 40, *, only: tuple[str, ...] | None = None) -> None:
    """A run's metrics as the RL loop writes them; eval every 10 steps, from step 0."""
    with MetricsLog(run_dir) as log:
        for step in range(steps):
            metrics: dict[str, float | int] = {
                "policy_version": step,
                "reward/mean": 0.2 + 0.6 * step / steps,
                "staleness/max": step % 3,
                "staleness/mean": (step % 3) / 2,
                "staleness/dropped": step // 10,
                "logprob_gap/max": 0.01,
                "throughput/samples_per_s": 50 + step,
                "throughput/train_tokens_per_s": 4000 - step,
                "time/step_s": 1.5,
                "loss/total": 1 / (step + 1),
                "loss/policy": -0.1 + 0.01 * step,
                "clip/fraction": 0.05,
                "kl/mean": 0.001 * step if step != 5 else math.nan,
                "entropy/mean": 1.2,
                "grad_norm": 3.0,
            }
            if step % 10 == 0:
                metrics |= {"eval/pass@1": step / 50, "eval/pass@8": step / 40}
            if only is not None:
                metrics = {k: v for k, v in metrics.items() if k.startswith(only)}
            log.write(step, metrics)


def _check_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    width, height = struct.unpack(">II", data[16:24])  # the IHDR chunk
    assert width >= 400 and height >= 200 and len(data) > 10_000, (path, width, height)
    pixels = np.asarray(Image.open(path).convert("L"))
    # Lines, ticks and labels: far from a blank image.
    assert (pixels < 128).mean() > 0.002, f"{path} looks blank"


def test_plots_every_topic(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    _write_run(tmp_path)
    assert main(["plot", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    for name in ALL_PLOTS:
        path = tmp_path / "plots" / f"{name}.png"
        assert f"wrote {path}" in out
        _check_png(path)
    assert sorted(p.stem for p in (tmp_path / "plots").iterdir()) == sorted(ALL_PLOTS)


def test_topics_without_metrics_are_skipped(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    _write_run(tmp_path, only=("reward/", "loss/"))
    out_dir = tmp_path / "elsewhere"
    assert main(["plot", str(tmp_path), "--out", str(out_dir)]) == 0
    out = capsys.readouterr().out
    assert sorted(p.name for p in out_dir.iterdir()) == ["loss.png", "reward.png"]
    for name in ("pass_at_k", "kl", "staleness", "throughput"):
        assert f"skipped {name}.png: the run recorded none of its metrics" in out
    assert not (tmp_path / "plots").exists()
    for path in out_dir.iterdir():
        _check_png(path)


def test_a_metric_that_is_always_null_is_not_drawn(tmp_path: Path) -> None:
    with MetricsLog(tmp_path) as log:
        for step in range(3):
            log.write(step, {"reward/mean": 0.5, "kl/mean": math.nan})
    assert main(["plot", str(tmp_path)]) == 0
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == ["reward.png"]


def _plot(*args: str, pre: str = "") -> subprocess.CompletedProcess[str]:
    """``rlax plot`` as a user runs it, in a fresh interpreter."""
    code = f"{pre}\nimport sys\nfrom rlax_core.cli.main import entry_point\nentry_point()"
    return subprocess.run(
        [sys.executable, "-c", code, "plot", *args], capture_output=True, text=True, timeout=120
    )


def test_a_missing_run_dir_exits_2_without_a_traceback(tmp_path: Path) -> None:
    result = _plot(str(tmp_path / "nowhere"))
    assert result.returncode == 2
    assert "does not exist" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no metrics.jsonl in"),
        ("", "holds no metrics yet"),
        ('{"step": 0, "grad_norm": 1.0}\n', "none of the metrics rlax plot draws"),
        ('{"step": 0}\n{"step": \n{"step": 2}\n', "line 2: not JSON"),
    ],
)
def test_metrics_it_cannot_plot_are_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture, content: str | None, message: str
) -> None:
    if content is not None:
        (tmp_path / METRICS_FILE).write_text(content)
    assert main(["plot", str(tmp_path)]) == 2
    assert message in capsys.readouterr().err


def test_without_matplotlib_it_says_what_to_install(tmp_path: Path) -> None:
    _write_run(tmp_path, steps=3)
    # A None entry in sys.modules makes `import matplotlib` fail as if it were not installed.
    result = _plot(str(tmp_path), pre="import sys; sys.modules['matplotlib'] = None")
    assert result.returncode == 1
    assert "pip install rlax-core[plot]" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "plots").exists()


def test_series_order_and_gaps() -> None:
    rows = [
        {"step": 0, "eval/pass@16": 0.5, "eval/pass@2": 0.25, "eval/pass@1": 0.1},
        {"step": 1, "staleness/dropped": 0, "staleness/mean": 0.5, "staleness/max": 1},
        {"step": 2, "staleness/dropped": 1, "staleness/mean": None, "staleness/max": 2},
    ]
    plots = {plot.name: plot for plot in PLOTS}
    assert list(_series(rows, plots["pass_at_k"])) == ["eval/pass@1", "eval/pass@2", "eval/pass@16"]
    staleness = _series(rows, plots["staleness"])
    assert list(staleness) == ["staleness/max", "staleness/mean", "staleness/dropped"]
    steps, values = staleness["staleness/mean"]
    assert steps == [1, 2] and values[0] == 0.5 and math.isnan(values[1])
