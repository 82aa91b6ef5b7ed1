"""The run directory: resolved config, checkpoints, metrics, status files.

::

    RUN_DIR/
      config.yaml        the resolved run config (every default written out)
      checkpoints/       Orbax step directories
      metrics.jsonl      one JSON object per step
      tensorboard/       event files
      status/            one JSON file per process (role, pid, version, throughput)
      plots/             `rlax plot RUN_DIR`
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import yaml

from rlax_core.errors import ConfigError

CONFIG_FILE = "config.yaml"
# Settings a resumed run may change: schedules of evaluation and checkpoints, the step
# budget (to extend a run), where metrics are logged. Anything else would silently
# change what is trained.
RESUMABLE_CHANGES = (
    "trainer.total_steps",
    "eval",
    "checkpoint",
    "run.run_dir",
    "launcher",
    "metrics",
)


def default_run_dir(config: Any) -> Path:
    """``run.run_dir``, or ``runs/<run.name>``."""
    return Path(config.run.run_dir or Path("runs") / config.run.name)


def prepare(
    run_dir: Path, config: Any, *, resume: bool, has_checkpoint: bool, write: bool = True
) -> None:
    """Creates the run directory, or checks that resuming it is safe.

    Args:
        write: write the resolved config (False on all but one process of a trainer).

    Raises:
        ConfigError: the directory holds a run but ``resume`` was not asked for, or the
            config differs from the one it was started with in what it trains.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    resolved = config.model_dump(mode="json")
    saved_path = run_dir / CONFIG_FILE
    if has_checkpoint and not resume:
        raise ConfigError(
            f"{run_dir} already holds a run with checkpoints; pass --resume to continue it, "
            "or choose another --run-dir"
        )
    if has_checkpoint and saved_path.exists():
        saved = yaml.safe_load(saved_path.read_text())
        changed = [key for key in _diff(saved, resolved) if not key.startswith(RESUMABLE_CHANGES)]
        if changed:
            raise ConfigError(
                f"the config differs from the one {run_dir} was started with in "
                f"{', '.join(changed[:8])}; resuming would train something else — revert "
                "those settings or start a new run directory"
            )
    if not write:
        return
    tmp = saved_path.with_name(f".{CONFIG_FILE}.tmp")
    tmp.write_text(yaml.safe_dump(resolved, sort_keys=False))
    os.replace(tmp, saved_path)


def write_status(run_dir: Path, name: str, fields: dict[str, Any]) -> None:
    """Atomically writes ``status/<name>.json`` (read by `rlax status`)."""
    folder = run_dir / "status"
    folder.mkdir(parents=True, exist_ok=True)
    data = {"name": name, "pid": os.getpid(), "updated_at": time.time(), **fields}
    tmp = folder / f".{name}.json.tmp"
    tmp.write_text(json.dumps(data))
    os.replace(tmp, folder / f"{name}.json")


def _diff(a: Any, b: Any, prefix: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        keys = sorted(set(a) | set(b))
        return [d for k in keys for d in _diff(a.get(k), b.get(k), f"{prefix}{k}.")]
    return [] if a == b else [prefix.rstrip(".")]
