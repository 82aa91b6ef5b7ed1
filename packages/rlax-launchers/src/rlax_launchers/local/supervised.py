"""One process the local launcher supervises: start, watch, signal, restart with back-off.

Every incarnation runs in a process group of its own (``start_new_session``), so a
signal to the group reaches the process and whatever it started (a nats-server, a
sandboxed program), and a Ctrl-C in the launcher's terminal reaches only the launcher,
which then stops the groups in order. Each child also gets ``PR_SET_PDEATHSIG``
(SIGTERM), so a launcher that is itself killed does not leave the run behind.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from rlax_core.kit.launcher import (
    LOGS_DIR,
    ProcessEntry,
    ProcessRole,
    ProcessState,
    signal_when_parent_dies,
)


class SupervisedProcess:
    """A named process of the run and its history of starts and exits.

    Args:
        name: unique in the run ('transport', 'trainer', 'w0', ...).
        role: what it does.
        command: its argv.
        run_dir: the run directory (its log is ``logs/<name>.log`` there).
    """

    def __init__(self, name: str, role: ProcessRole, command: list[str], run_dir: Path) -> None:
        self.name = name
        self.role: ProcessRole = role
        self.command = command
        self.log_path = run_dir / LOGS_DIR / f"{name}.log"
        self.state: ProcessState = "starting"
        self.restarts = 0
        self.crashes = 0
        self.preemptions = 0
        self.failures_in_row = 0
        self.last_exit_code: int | None = None
        self.started_at: float | None = None  # wall clock, for the table
        self.restart_at: float | None = None  # monotonic, while restarting
        self._started_mono = 0.0
        self._process: subprocess.Popen | None = None
        self._log_offset = 0

    @property
    def pid(self) -> int | None:
        """pid of the current incarnation (also its process group)."""
        return self._process.pid if self._process is not None else None

    def start(self, env: dict[str, str]) -> None:
        """Starts a new incarnation; its output is appended to the log."""
        with self._new_incarnation() as log:
            self._process = subprocess.Popen(
                self.command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                preexec_fn=signal_when_parent_dies(os.getpid(), signal.SIGTERM),
            )
        self._running()

    @contextlib.contextmanager
    def _new_incarnation(self) -> Iterator[BinaryIO]:
        """The log, open for appending, with a line that says which start this is."""
        if self.started_at is not None:
            self.restarts += 1
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            log.write(
                f"--- {stamp} rlax launch: start {self.restarts + 1} of {self.name}: "
                f"{shlex.join(self.command)}\n".encode()
            )
            log.flush()
            self._log_offset = log.tell()
            yield log

    def _running(self) -> None:
        self.state = "running"
        self.started_at = time.time()
        self._started_mono = time.monotonic()
        self.restart_at = None

    def poll(self) -> int | None:
        """The exit status if the current incarnation has ended (a signal n gives 128 + n).

        An ended process is not reaped before its group is killed: while it is a zombie
        its pid cannot be reused, so the SIGKILL reaches only what it left behind.
        """
        process = self._process
        if process is None:
            return None
        if process.returncode is None:
            flags = os.WEXITED | os.WNOHANG | os.WNOWAIT
            try:
                ended = os.waitid(os.P_PID, process.pid, flags) is not None
            except ChildProcessError:
                ended = True
            if not ended:
                return None
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        code = process.returncode
        return 128 - code if code < 0 else code

    def running_for_s(self) -> float:
        """Seconds since the current incarnation started."""
        return time.monotonic() - self._started_mono

    def signal_group(self, signum: int) -> None:
        """Sends ``signum`` to the process group, while its leader is not reaped."""
        if self._process is not None and self._process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._process.pid, signum)

    def stop(self, grace_s: float) -> int | None:
        """SIGTERM, up to ``grace_s`` to exit, then SIGKILL; returns the exit status."""
        self.signal_group(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while self.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.kill()

    def kill(self) -> int | None:
        """SIGKILL to the group and reap; returns the exit status (None if never started)."""
        if self._process is None:
            return None
        self.signal_group(signal.SIGKILL)  # the group: a child may outlive the process
        self._process.wait()
        return self.poll()

    def log_tail(self, lines: int = 30) -> str:
        """The last lines this incarnation wrote."""
        try:
            with self.log_path.open("rb") as log:
                log.seek(self._log_offset)
                text = log.read().decode(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def log_contains(self, marker: str) -> bool:
        """Whether this incarnation's output holds ``marker`` (e.g. a readiness line)."""
        try:
            with self.log_path.open("rb") as log:
                log.seek(self._log_offset)
                return marker.encode() in log.read()
        except OSError:
            return False

    def entry(self) -> ProcessEntry:
        """The process's line of the process table."""
        pid = self.pid if self.state == "running" else None
        return ProcessEntry(
            name=self.name,
            role=self.role,
            state=self.state,
            pid=pid,
            pgid=pid,
            restarts=self.restarts,
            crashes=self.crashes,
            preemptions=self.preemptions,
            last_exit_code=self.last_exit_code,
            started_at=self.started_at,
            log=str(Path(LOGS_DIR) / self.log_path.name),
        )
