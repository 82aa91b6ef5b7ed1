"""The run's metrics on Weights & Biases, when the run config asks (``metrics.wandb``).

``wandb`` is an optional extra (``pip install 'rlax-core[wandb]'``), imported only when
a run enables it. W&B keeps its local files in ``RUN_DIR/wandb/`` (in offline mode,
everything: ``wandb sync RUN_DIR/wandb/offline-run-*`` uploads it later). The W&B run id
is kept in ``RUN_DIR/wandb-run-id``, so a resumed run continues the same W&B run.

W&B steps only increase: when a resumed run repeats the steps a crashed run logged
after its last checkpoint, W&B keeps the values it already has for them (and warns).
``metrics.jsonl`` stays the source of truth.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from rlax_core.errors import ConfigError

if TYPE_CHECKING:
    from rlax_core.config.sections.metrics import WandbSection

WANDB_RUN_ID_FILE = "wandb-run-id"


def import_wandb() -> ModuleType:
    """The ``wandb`` module.

    Raises:
        ConfigError: wandb is not installed (the message names the extra to install).
    """
    try:
        import wandb
    except ImportError as exc:
        raise ConfigError(
            "metrics.wandb is set in the run config but wandb is not installed: "
            "pip install 'rlax-core[wandb]' (or remove metrics.wandb)"
        ) from exc
    return wandb


class WandbRun:
    """One W&B run fed with each step's scalars; made by the process that writes metrics.

    Args:
        config: the ``metrics.wandb`` section.
        run_dir: the run directory (W&B's local files go to ``run_dir/wandb/``).
        run_config: recorded as the W&B run's config (the resolved run config).

    Raises:
        ConfigError: wandb is not installed.
    """

    def __init__(
        self, config: WandbSection, run_dir: Path, *, run_config: Mapping[str, Any] | None = None
    ) -> None:
        wandb = import_wandb()
        id_path = run_dir / WANDB_RUN_ID_FILE
        run_id = id_path.read_text().strip() if id_path.is_file() else None
        self._run = wandb.init(
            project=config.project,
            entity=config.entity,
            name=config.name or run_dir.resolve().name,
            group=config.group,
            tags=config.tags or None,
            mode=config.mode,
            dir=str(run_dir),
            id=run_id,
            # "allow": continue the run of that id if there is one, else start it.
            resume="allow",
            config=dict(run_config) if run_config is not None else None,
        )
        if run_id is None:
            tmp = id_path.with_name(f".{WANDB_RUN_ID_FILE}.tmp")
            tmp.write_text(self._run.id + "\n")
            os.replace(tmp, id_path)

    def log(self, step: int, scalars: Mapping[str, float]) -> None:
        """Logs one step's scalars at W&B step ``step``; none, nothing."""
        if scalars:
            self._run.log(dict(scalars), step=step)

    def close(self) -> None:
        """Finishes the W&B run (online: waits for the upload)."""
        self._run.finish()
