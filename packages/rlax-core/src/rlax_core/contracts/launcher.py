"""Launchers: turn a run config into running processes, or into rendered manifests."""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, get_args

from pydantic import Field

from rlax_core.types.record import Record

if TYPE_CHECKING:
    from rlax_core.config.run_config import RunConfigBase


class RenderedArtifact(Record):
    """One thing a launcher would create: a command line, a script or a manifest."""

    kind: Literal["command", "script", "manifest"] = Field(description="What this is.")
    name: str = Field(
        description="Short name, e.g. 'trainer' or 'JobSet/my-run'; for a script, the file "
        "the rendered commands read it from."
    )
    content: str = Field(description="The exact command, script text or YAML.")


ProcessRole = Literal["transport", "trainer", "worker", "verifier"]
"""What a process does in a run: serve the transport, train, generate or judge rollouts."""

ProcessState = Literal["starting", "running", "restarting", "stopped", "failed"]
"""Where a process is in its life, as its launcher sees it."""

PROCESS_STATES: tuple[ProcessState, ...] = get_args(ProcessState)


class ProcessStatus(Record):
    """The state of one process (or pod) of a run."""

    role: ProcessRole = Field(description="What the process does in the run.")
    name: str = Field(description="Unique name within the run, e.g. 'worker-2'.")
    state: ProcessState = Field(description="Lifecycle state.")
    pid: int | None = Field(default=None, description="OS process id, where there is one.")
    restarts: int = Field(default=0, ge=0, description="Times the process was restarted.")
    policy_version: int | None = Field(default=None, description="Weights it holds.")
    throughput: dict[str, Any] = Field(default_factory=dict, description="Role-specific rates.")


class Launcher(ABC):
    """Places a run on machines and reports on it.

    ``run_dir`` is always a local directory: where a local launcher keeps its processes'
    logs, and where a cloud launcher writes the files its commands read (start-up
    scripts). The run directory that a cloud run's processes share (``gs://...``) is
    part of that launcher's own config.

    Attributes:
        creates_cloud_resources: True for a launcher whose :meth:`launch` creates
            resources that cost money or outlive this process (TPU VMs, Kubernetes
            objects). ``rlax launch`` then only renders them unless ``--apply`` is given.
    """

    creates_cloud_resources: ClassVar[bool] = False

    @abstractmethod
    def render(self, run_config: RunConfigBase, run_dir: Path) -> list[RenderedArtifact]:
        """What :meth:`launch` would do, without doing it (``--dry-run``)."""

    @abstractmethod
    def launch(self, run_config: RunConfigBase, run_dir: Path) -> None:
        """Starts the run.

        A local launcher returns when the run has finished or was stopped; a cloud
        launcher returns once every resource of :meth:`render` is created (the run goes
        on without this process).
        """

    @abstractmethod
    def status(self, run_dir: Path) -> list[ProcessStatus]:
        """The state of every process the launcher started for the run in ``run_dir``."""

    @abstractmethod
    def stop(self, run_dir: Path) -> None:
        """Stops everything the launcher started for the run, and nothing else."""
