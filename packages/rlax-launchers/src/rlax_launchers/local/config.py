"""Settings of the ``local`` launcher (the ``launcher:`` section of a run config)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class LocalLauncherConfig(BaseModel):
    """Runs the transport server, the trainer, the workers and the verifiers as processes on
    this machine."""

    model_config = ConfigDict(extra="forbid")

    workers: int | None = Field(
        default=None, ge=1, description="Inference worker processes (null: rollout.workers)."
    )
    verifiers: int | None = Field(
        default=None,
        ge=0,
        description="Verifier processes, named v0, v1, ... (verifier.placement: stage; null: "
        "verifier.workers when the run judges in a stage, else none).",
    )
    restart_backoff_s: float = Field(
        default=1.0,
        gt=0,
        description="Seconds before a process that died is started again; doubles with each "
        "failure in a row (a preempted worker always waits this long).",
    )
    max_backoff_s: float = Field(
        default=30.0, gt=0, description="Longest wait before a restart, in seconds."
    )
    stable_after_s: float = Field(
        default=60.0,
        gt=0,
        description="A process that ran this many seconds before it died is not failing in a "
        "loop: its next restart waits restart_backoff_s again.",
    )
    max_failures: int = Field(
        default=10,
        ge=1,
        description="Give up the run when one process died this many times in a row, each "
        "time within stable_after_s of its start (a crash loop).",
    )
    stop_grace_s: float = Field(
        default=30.0,
        ge=0,
        description="Seconds a process has after SIGTERM when the run stops (a trainer writes "
        "its checkpoint) before it is killed.",
    )
    server_start_timeout_s: float = Field(
        default=60.0,
        gt=0,
        description="Seconds the transport server has to start before the launch fails.",
    )
    compilation_cache: bool = Field(
        default=True,
        description="Share a persistent JAX compilation cache among the run's processes "
        "(RUN_DIR/jax_cache, unless JAX_COMPILATION_CACHE_DIR is set), so a restarted "
        "worker or trainer loads its compiled programs instead of compiling them again.",
    )
    env: dict[str, str] = Field(
        default_factory=dict,
        description="Environment variables set for every process, e.g. {XLA_FLAGS: ...}.",
    )
