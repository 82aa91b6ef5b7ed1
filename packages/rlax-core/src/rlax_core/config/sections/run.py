"""The run's identity: its name, seed and run directory."""

from __future__ import annotations

from pydantic import Field

from rlax_core.config.sections.base import Section


class RunSection(Section):
    """Identity and reproducibility of the run."""

    name: str = Field(
        default="rlax-run",
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
        description="Name of the run; the default run directory is runs/<name>.",
    )
    seed: int = Field(default=0, ge=0, description="Seed of every RNG stream of the run.")
    run_dir: str | None = Field(
        default=None,
        description="Directory for checkpoints, metrics and logs (default: runs/<name>).",
    )
