"""The process table of a locally launched run, kept in the run directory.

A launcher that starts a run's processes on this machine (``launcher: {type: local}``)
records them here, so other commands find them without talking to it::

    RUN_DIR/
      launcher.json        the table: the launcher's pid, and per process its name, role,
                           pid, process group, state, restarts, crashes, preemptions
      logs/<name>.log      each process's stdout and stderr, appended across restarts
      logs/events.jsonl    one line per start and exit (what `rlax bench chaos` reads)
      preempting/<name>    written by `rlax preempt` before it signals the process, so the
                           launcher counts the exit as a preemption, not a crash

The table is rewritten atomically (write a temporary file, then rename), so a reader
never sees half of it. Core owns the format: ``rlax status`` and ``rlax preempt`` read it
without importing the launcher plugin that writes it.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from pydantic import Field

from rlax_core.contracts.launcher import ProcessRole, ProcessState
from rlax_core.errors import ConfigError
from rlax_core.types.record import Record

TABLE_FILE = "launcher.json"
LOGS_DIR = "logs"
EVENTS_FILE = "events.jsonl"
PREEMPTING_DIR = "preempting"


class ProcessEntry(Record):
    """One supervised process of the run, as the launcher last saw it."""

    name: str = Field(description="Unique name in the run: 'transport', 'trainer', 'w0', ...")
    role: ProcessRole = Field(description="What it does.")
    state: ProcessState = Field(description="Lifecycle state.")
    pid: int | None = Field(default=None, description="OS pid of the current incarnation.")
    pgid: int | None = Field(default=None, description="Its process group (signals go here).")
    restarts: int = Field(default=0, ge=0, description="Times it was started again.")
    crashes: int = Field(default=0, ge=0, description="Exits that were not asked for.")
    preemptions: int = Field(default=0, ge=0, description="Exits by `rlax preempt`.")
    last_exit_code: int | None = Field(default=None, description="Exit status of the last exit.")
    started_at: float | None = Field(default=None, description="Unix time of the last start.")
    log: str = Field(description="Its log file, relative to the run directory.")
    container: str | None = Field(
        default=None, description="The container it runs in, where a launcher made one."
    )


class ProcessTable(Record):
    """Everything a local launcher started for one run."""

    launcher_pid: int = Field(description="pid of the `rlax launch` process supervising them.")
    updated_at: float = Field(description="Unix time this table was written.")
    processes: tuple[ProcessEntry, ...] = Field(description="The supervised processes.")

    def entry(self, name: str) -> ProcessEntry | None:
        """The process called ``name``, or None."""
        return next((p for p in self.processes if p.name == name), None)


def write_table(run_dir: Path, table: ProcessTable) -> None:
    """Atomically replaces ``RUN_DIR/launcher.json``."""
    run_dir.mkdir(parents=True, exist_ok=True)
    tmp = run_dir / f".{TABLE_FILE}.{os.getpid()}.tmp"
    tmp.write_text(table.model_dump_json(indent=1))
    os.replace(tmp, run_dir / TABLE_FILE)


def read_table(run_dir: Path) -> ProcessTable:
    """Reads the process table of a locally launched run.

    Raises:
        ConfigError: ``run_dir`` does not exist, or holds no table (it was not started
            with the local launcher); the message says which.
    """
    if not run_dir.is_dir():
        raise ConfigError(f"no run directory {run_dir}: give the RUN_DIR of a launched run")
    path = run_dir / TABLE_FILE
    if not path.exists():
        raise ConfigError(
            f"{run_dir} holds no {TABLE_FILE}: it was not started with "
            "`rlax launch CONFIG` and launcher: {type: local}"
        )
    return ProcessTable.model_validate_json(path.read_text())


def append_event(run_dir: Path, event: str, name: str, **fields: Any) -> None:
    """Appends one line to ``logs/events.jsonl``: ``{"time", "event", "name", ...}``."""
    folder = run_dir / LOGS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    line = json.dumps({"time": time.time(), "event": event, "name": name, **fields})
    with (folder / EVENTS_FILE).open("a", encoding="utf-8") as handle:
        handle.write(line + "\n")


def read_events(run_dir: Path) -> list[dict[str, Any]]:
    """The launcher's events, oldest first (a torn last line is skipped)."""
    path = run_dir / LOGS_DIR / EVENTS_FILE
    if not path.exists():
        return []
    events = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return events


def mark_preempting(run_dir: Path, name: str) -> None:
    """Notes that ``name``'s coming exit is a preemption (``rlax preempt`` writes it)."""
    folder = run_dir / PREEMPTING_DIR
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(str(time.time()))


def take_preempting(run_dir: Path, name: str) -> bool:
    """Whether ``name`` was being preempted; clears the note."""
    try:
        (run_dir / PREEMPTING_DIR / name).unlink()
    except FileNotFoundError:
        return False
    return True


def pid_alive(pid: int | None) -> bool:
    """Whether a process with this pid exists (and is not a zombie)."""
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        # A zombie is dead but still signalable until its parent reaps it.
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except (OSError, IndexError):
        return True
