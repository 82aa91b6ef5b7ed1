"""The status of a run's processes: each process's status file, and the rows `rlax status` shows.

Two sources, both in the run directory: the local launcher's process table
(``launcher.json``: pid, state, restarts; see :mod:`~rlax_core.run_dir.process_table`)
and the status file each process writes every few seconds (``status/<name>.json``:
role, policy version, throughput, time of the update). A run started by other means (a
cloud launcher, processes started by hand) has status files only; they are shown on
their own.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rlax_core.errors import ConfigError
from rlax_core.run_dir.layout import CONFIG_FILE, FINAL_DIR
from rlax_core.run_dir.metrics import MetricsFileError, read_metrics
from rlax_core.run_dir.process_table import TABLE_FILE, ProcessTable, pid_alive, read_table
from rlax_core.storage import AnyPath, write_text_atomically

STATUS_DIR = "status"
_NOT_PROCESSES = {"warm_start"}  # status files of a phase, not of a running process


def write_status(run_dir: AnyPath, name: str, fields: dict[str, Any]) -> None:
    """Atomically writes ``status/<name>.json`` (read by `rlax status`)."""
    folder = run_dir / STATUS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    data = {"name": name, "pid": os.getpid(), "updated_at": time.time(), **fields}
    write_text_atomically(folder / f"{name}.json", json.dumps(data))


@dataclass
class ProcessRow:
    """One line of the status table."""

    name: str
    role: str
    pid: int | None
    alive: bool
    state: str
    restarts: int
    crashes: int
    preemptions: int
    policy_version: int | None
    step: int | None
    throughput: dict[str, float]
    updated_age_s: float | None
    backlog: int | None = None  # a verifier's: groups waiting to be judged
    engine: dict[str, float] | None = None  # a streaming worker's: its rollout engine now
    load: dict[str, int] | None = None  # a transport server's: what it holds and refused
    container: str | None = None  # the container it runs in (the docker launcher's)


def collect_status(run_dir: Path) -> tuple[list[ProcessRow], ProcessTable | None]:
    """The rows of ``rlax status``: the launcher's processes, then other status files.

    Raises:
        ConfigError: no such directory, or it holds neither a process table nor status
            files.
    """
    if not run_dir.is_dir():
        raise ConfigError(f"no run directory {run_dir}: give the RUN_DIR of a run")
    statuses = read_statuses(run_dir)
    table = read_table(run_dir) if (run_dir / TABLE_FILE).exists() else None
    if table is None and not statuses:
        raise ConfigError(
            f"{run_dir} holds no {TABLE_FILE} and no {STATUS_DIR}/*.json: no process of a "
            "run has reported there (is it the run's --run-dir?)"
        )
    now = time.time()
    rows = []
    for entry in table.processes if table else ():
        status = statuses.pop(entry.name, {})
        alive = entry.state in ("starting", "running") and pid_alive(entry.pid)
        rows.append(
            _row(
                entry.name,
                entry.role,
                entry.pid,
                alive,
                entry.state,
                status,
                now,
                restarts=entry.restarts,
                crashes=entry.crashes,
                preemptions=entry.preemptions,
                container=entry.container,
            )
        )
    for name, status in sorted(statuses.items()):
        pid = status.get("pid")
        alive = pid_alive(pid)
        rows.append(
            _row(
                name,
                status.get("role", "?"),
                pid,
                alive,
                "running" if alive else "unknown",
                status,
                now,
            )
        )
    return rows, table


def read_statuses(run_dir: AnyPath) -> dict[str, dict[str, Any]]:
    """``status/<name>.json`` of every process, by name (unreadable files are skipped)."""
    folder = run_dir / STATUS_DIR
    statuses: dict[str, dict[str, Any]] = {}
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else ():
        if path.stem in _NOT_PROCESSES:
            continue
        try:
            statuses[path.stem] = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue  # being replaced right now; the next call reads it
    return statuses


def _row(
    name: str,
    role: str,
    pid: int | None,
    alive: bool,
    state: str,
    status: dict[str, Any],
    now: float,
    container: str | None = None,
    **counts: int,
) -> ProcessRow:
    updated = status.get("updated_at")
    throughput = {
        k: float(v)
        for k, v in (status.get("throughput") or {}).items()
        if isinstance(v, int | float)
    }
    return ProcessRow(
        name=name,
        role=role,
        pid=pid,
        alive=alive,
        state=state,
        restarts=counts.get("restarts", 0),
        crashes=counts.get("crashes", 0),
        preemptions=counts.get("preemptions", 0),
        policy_version=status.get("policy_version"),
        step=status.get("step"),
        throughput=throughput,
        updated_age_s=None if updated is None else max(0.0, now - float(updated)),
        backlog=status.get("backlog"),
        engine=status.get("engine"),
        load=status.get("load"),
        container=container,
    )


@dataclass
class RunProgress:
    """How far a run got, as its run directory tells: ``config.yaml``, ``metrics.jsonl``
    and ``final/``.

    Attributes:
        step: the last RL step logged (0: none trained yet).
        total_steps: the step budget of the run's resolved config.
        finished: the budget was reached and ``final/`` written (what ``--resume`` finds
            nothing left to do in).
        evaluation: the last evaluation's ``eval/…`` metrics; empty if none.
        eval_step: the step of that evaluation.
    """

    step: int
    total_steps: int
    finished: bool
    evaluation: dict[str, float] = field(default_factory=dict)
    eval_step: int | None = None

    def pass_at_k(self) -> str:
        """``pass@1 0.930, pass@8 0.990`` of the last evaluation (empty if none)."""
        ks = sorted(
            (int(key.split("@")[1]), value)
            for key, value in self.evaluation.items()
            if key.startswith("eval/pass@") and value is not None
        )
        return ", ".join(f"pass@{k} {value:.3f}" for k, value in ks)


def reached_the_end(run_dir: AnyPath, step: int, total_steps: int) -> bool:
    """The rule for a finished run: its step budget reached and its final policy exported
    (``final/``, written after the last step)."""
    return step >= total_steps and (run_dir / FINAL_DIR).exists()


def run_progress(run_dir: AnyPath) -> RunProgress | None:
    """How far the run in ``run_dir`` got; None when it holds no run (no ``config.yaml``)."""
    try:
        saved = yaml.safe_load((run_dir / CONFIG_FILE).read_text())
        total = int(saved["trainer"]["total_steps"])
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError):
        return None
    try:
        rows = read_metrics(run_dir)
    except MetricsFileError:
        rows = []
    step = max((row["step"] for row in rows), default=0)
    evaluated = [row for row in rows if any(key.startswith("eval/") for key in row)]
    progress = RunProgress(step, total, finished=reached_the_end(run_dir, step, total))
    if evaluated:
        last = evaluated[-1]
        progress.evaluation = {k: v for k, v in last.items() if k.startswith("eval/")}
        progress.eval_step = last["step"]
    return progress


def describe_run(run_dir: AnyPath, progress: RunProgress, *, running: bool = False) -> list[str]:
    """What a run came to, in a few lines: what ``rlax train`` prints when it ends and
    ``rlax status`` above its table."""
    evaluation = progress.pass_at_k()
    held_out = f"; held-out {evaluation} at step {progress.eval_step}" if evaluation else ""
    if progress.finished:
        final = run_dir / FINAL_DIR
        return [
            f"finished: {progress.step} steps trained{held_out}",
            f"  the trained policy: {final} (Hugging Face safetensors: rlax eval "
            f"{run_dir / CONFIG_FILE} --checkpoint {final}; rlax serve policy --model {final})",
            f"  metrics: {run_dir / 'metrics.jsonl'}, {run_dir / 'tensorboard'}; plots: "
            f"rlax plot {run_dir} (into {run_dir / 'plots'})",
        ]
    state = "running" if running else "stopped"
    lines = [f"{state}: step {progress.step} of {progress.total_steps}{held_out}"]
    if not running:
        lines.append(f"  continue it: rlax train {run_dir / CONFIG_FILE} --resume")
    return lines
