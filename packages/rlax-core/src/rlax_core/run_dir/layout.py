"""Where a run directory is, and its resolved config: created, or checked before a resume.

``RUN_DIR/config.yaml`` holds the run config with every default written out, every path
the run reads made absolute and ``run.run_dir`` set to the run directory, so that
``rlax train RUN_DIR/config.yaml --resume`` continues the run as it is, from any working
directory. A resume may change only the schedules and the step budget
(:data:`RESUMABLE_CHANGES`); anything else would silently train something other than
what was started. Paths are compared resolved: the config the run started from (its
paths relative to its own folder) and the saved one resume the same run.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from rlax_core.errors import ConfigError
from rlax_core.storage import AnyPath, is_remote, storage_path, write_text_atomically

if TYPE_CHECKING:
    from rlax_core.config.run_config import RunConfigBase


CONFIG_FILE = "config.yaml"
FINAL_DIR = "final"  # the policy a finished run exports
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


def default_run_dir(config: RunConfigBase, given: str | os.PathLike[str] | None = None) -> AnyPath:
    """``given`` (``--run-dir``), else ``run.run_dir``, else ``runs/<run.name>``: a local
    path or a bucket URL (see :mod:`rlax_core.storage`)."""
    return storage_path(given or config.run.run_dir or Path("runs") / config.run.name)


def resolved_config(config: RunConfigBase, config_dir: Path, run_dir: AnyPath) -> dict[str, Any]:
    """The run config as ``RUN_DIR/config.yaml`` holds it (see the module docstring).

    Args:
        config_dir: the folder of the config file (its relative paths start there).
        run_dir: the run directory.
    """
    resolved = _absolute_paths(config.model_dump(mode="json"), config_dir)
    resolved["run"]["run_dir"] = str(run_dir) if is_remote(run_dir) else os.path.abspath(run_dir)
    return resolved


def _absolute_paths(data: dict[str, Any], config_dir: Path) -> dict[str, Any]:
    """``data`` (a dumped run config) with each local path the run reads made absolute:
    ``model.path``, ``model.tokenizer``, each dataset's ``path``."""

    def absolute(holder: dict[str, Any] | None, key: str) -> None:
        if holder is None:
            return
        value = holder.get(key)
        if isinstance(value, str) and "://" not in value:  # a bucket's URL stays as it is
            holder[key] = os.path.abspath(storage_path(value, Path(config_dir)))

    absolute(data.get("model"), "path")
    absolute(data.get("model"), "tokenizer")
    datasets = data.get("data") or {}
    for dataset in [*(datasets.get("train") or []), datasets.get("eval")]:
        absolute(dataset, "path")
    return data


def prepare(
    run_dir: AnyPath,
    config: RunConfigBase,
    *,
    resume: bool,
    has_checkpoint: bool,
    config_dir: Path,
    write: bool = True,
) -> None:
    """Creates the run directory, or checks that resuming it is safe.

    Args:
        config_dir: the folder of the config file (its relative paths start there).
        write: write the resolved config (False on all but one process of a trainer).

    Raises:
        ConfigError: the directory holds a run but ``resume`` was not asked for, or the
            config differs from the one it was started with in what it trains.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    resolved = resolved_config(config, config_dir, run_dir)
    saved_path = run_dir / CONFIG_FILE
    if has_checkpoint and not resume:
        raise ConfigError(
            f"{run_dir} already holds a run with checkpoints; pass --resume to continue it, "
            "or choose another --run-dir"
        )
    if has_checkpoint and saved_path.exists():
        # A run directory from before paths were saved resolved holds them relative to
        # the folder of the config it was started from: the one given now.
        saved = _absolute_paths(yaml.safe_load(saved_path.read_text()), config_dir)
        changed = [key for key in _diff(saved, resolved) if not key.startswith(RESUMABLE_CHANGES)]
        if changed:
            raise ConfigError(
                f"the config differs from the one {run_dir} was started with in "
                f"{', '.join(changed[:8])}; resuming would train something else — revert "
                "those settings or start a new run directory"
            )
    if not write:
        return
    write_text_atomically(saved_path, yaml.safe_dump(resolved, sort_keys=False))


def resumable(run_dir: AnyPath, config: RunConfigBase, config_dir: Path) -> int | None:
    """Checks that ``--resume`` has a run to continue in ``run_dir`` (``config_dir``: the
    folder of the config file).

    Returns:
        None when the run goes on; the last step when it already finished
        (``trainer.total_steps`` reached and ``final/`` written): nothing is left to do.

    Raises:
        ConfigError: ``run_dir`` holds no run (no ``config.yaml``), or a finished one
            that ``config`` differs from in what it trains (see :func:`prepare`).
    """
    from rlax_core.run_dir.metrics import MetricsFileError, read_metrics

    if not (run_dir / CONFIG_FILE).exists():
        raise ConfigError(
            f"--resume: {run_dir} holds no run to resume (no {CONFIG_FILE}); drop --resume "
            "to start a new run there, or give the --run-dir of the run to continue"
        )
    if not (run_dir / FINAL_DIR).exists():
        return None
    try:
        steps = [row["step"] for row in read_metrics(run_dir)]
    except MetricsFileError:
        return None
    last = max(steps, default=0)
    if last < config.trainer.total_steps:
        return None
    prepare(run_dir, config, resume=True, has_checkpoint=True, config_dir=config_dir, write=False)
    return last


def _diff(a: Any, b: Any, prefix: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        keys = sorted(set(a) | set(b))
        return [d for k in keys for d in _diff(a.get(k), b.get(k), f"{prefix}{k}.")]
    return [] if a == b else [prefix.rstrip(".")]
