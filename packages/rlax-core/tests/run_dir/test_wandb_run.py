"""Weights & Biases logging through MetricsLog: offline runs, read back with wandb's reader."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rlax_core.config.sections import WandbSection
from rlax_core.errors import ConfigError
from rlax_core.run_dir.metrics import METRICS_FILE, MetricsLog, read_metrics
from rlax_core.run_dir.wandb_run import WANDB_RUN_ID_FILE


@pytest.fixture
def offline_wandb(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> WandbSection:
    """An offline W&B section; wandb's own settings, caches and staging stay in tmp_path."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    for var in ("WANDB_DIR", "WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        folder = tmp_path / var.lower()
        folder.mkdir()
        monkeypatch.setenv(var, str(folder))
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    return WandbSection(project="rlax-tests", mode="offline", tags=["test"])


def _records(offline_run: Path) -> list[dict]:
    """The records of an offline run's .wandb log, as wandb's own reader prints them."""
    result = subprocess.run(
        [sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(offline_run)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


def _history(records: list[dict]) -> list[tuple[int, dict]]:
    """(W&B step, the values RLAX logged) of each history row."""
    rows = []
    for record in records:
        if record["type"] == "history":
            item = record["history"]["item"]
            values = {k: v for k, v in item.items() if not k.startswith("_")}
            rows.append((record["history"]["step"]["num"], values))
    return rows


@pytest.mark.slow
def test_an_offline_run_holds_every_step(tmp_path: Path, offline_wandb: WandbSection) -> None:
    run_dir = tmp_path / "my-run"
    with MetricsLog(run_dir, wandb=offline_wandb, run_config={"run": {"seed": 3}}) as log:
        for step in range(3):
            log.write(step, {"reward/mean": step / 4, "loss/total": 2.0 - step})
        log.write(3, {"reward/mean": 1.0, "loss/total": math.nan})
    assert [r["step"] for r in read_metrics(run_dir)] == [0, 1, 2, 3]

    (offline_run,) = (run_dir / "wandb").glob("offline-run-*")
    run_id = (run_dir / WANDB_RUN_ID_FILE).read_text().strip()
    assert (offline_run / f"run-{run_id}.wandb").is_file()
    records = _records(offline_run)
    # The non-finite loss of step 3 is left out, as in TensorBoard.
    assert _history(records) == [
        (0, {"reward/mean": 0.0, "loss/total": 2.0}),
        (1, {"reward/mean": 0.25, "loss/total": 1.0}),
        (2, {"reward/mean": 0.5, "loss/total": 0.0}),
        (3, {"reward/mean": 1.0}),
    ]
    (run,) = [r["run"] for r in records if r["type"] == "run"]
    assert (run["project"], run["display_name"], run["run_id"]) == ("rlax-tests", "my-run", run_id)
    assert run["tags"] == ["test"]
    assert run["config"]["update"]["run"] == {"seed": 3}
    assert [r["exit"]["exit_code"] for r in records if r["type"] == "exit"] == [0]


@pytest.mark.slow
def test_a_resumed_run_continues_the_same_wandb_run(
    tmp_path: Path, offline_wandb: WandbSection
) -> None:
    with MetricsLog(tmp_path, wandb=offline_wandb) as log:
        for step in range(4):
            log.write(step, {"x": float(step)})
    run_id = (tmp_path / WANDB_RUN_ID_FILE).read_text().strip()
    with MetricsLog(tmp_path, resume_from_step=1, wandb=offline_wandb) as log:
        for step in (2, 3, 4):
            log.write(step, {"x": 10.0 + step})
    assert (tmp_path / WANDB_RUN_ID_FILE).read_text().strip() == run_id
    # Named offline-run-<time>-<id>, with "-1" appended when both start within a second.
    runs = sorted((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 2 and all((r / f"run-{run_id}.wandb").is_file() for r in runs)
    assert [r["x"] for r in read_metrics(tmp_path)] == [0.0, 1.0, 12.0, 13.0, 14.0]
    assert _history(_records(runs[1])) == [(s, {"x": 10.0 + s}) for s in (2, 3, 4)]


def test_wandb_asked_for_but_missing_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` raises ImportError
    (tmp_path / METRICS_FILE).write_text('{"step": 0}\n{"step": 1}\n')
    section = WandbSection(project="p")
    with pytest.raises(ConfigError, match=r"pip install 'rlax-core\[wandb\]'"):
        MetricsLog(tmp_path, resume_from_step=0, wandb=section)
    # Refused before touching the run directory.
    assert sorted(p.name for p in tmp_path.iterdir()) == [METRICS_FILE]
    assert [r["step"] for r in read_metrics(tmp_path)] == [0, 1]


def test_wandb_is_not_imported_unless_enabled(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import sys
        from rlax_core.run_dir.metrics import MetricsLog
        with MetricsLog(sys.argv[1]) as log:
            log.write(0, {"x": 1.0})
        assert "wandb" not in sys.modules, "wandb was imported"
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
