"""Where the run's metrics go besides RUN_DIR/metrics.jsonl and RUN_DIR/tensorboard/."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from rlax_core.config.sections.base import Section


class WandbSection(Section):
    """Weights & Biases logging of each step's metrics (needs ``rlax-core[wandb]``)."""

    project: str = Field(min_length=1, description="The W&B project the run is logged to.")
    entity: str | None = Field(
        default=None, description="The W&B team or user (default: the login's default entity)."
    )
    mode: Literal["online", "offline"] = Field(
        default="online",
        description="online: stream to the W&B server (needs `wandb login` or "
        "WANDB_API_KEY); offline: write RUN_DIR/wandb/ only, to upload later with "
        "`wandb sync`.",
    )
    name: str | None = Field(
        default=None, description="Display name of the W&B run (default: the run directory's)."
    )
    group: str | None = Field(default=None, description="W&B group the run belongs to.")
    tags: list[str] = Field(default_factory=list, description="Tags of the W&B run.")


class MetricsSection(Section):
    """Where the run's metrics go: always metrics.jsonl and TensorBoard, optionally W&B."""

    wandb: WandbSection | None = Field(
        default=None,
        description="Also log each step's metrics to Weights & Biases (off when absent; "
        "needs `pip install 'rlax-core[wandb]'`).",
    )
