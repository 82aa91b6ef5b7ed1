"""The local launcher's supervision loop: start the run's processes, restart the ones that die.

* The transport server starts first; the launch waits until it prints ``serving``.
* Then the trainer and the workers. Any of them that dies is started again after a
  back-off that doubles with each failure in a row (reset once it ran ``stable_after_s``):
  a worker rejoins by pulling the newest weights, the trainer resumes from its last
  checkpoint, the transport server comes back on the same state folder and the clients
  reconnect. A worker preempted with ``rlax preempt`` counts as a preemption, not a crash.
* Exit status 2 is a bad config: restarting cannot help, so the launch fails at once; so
  does a process that dies ``max_failures`` times in a row (a crash loop).
* The run ends when the trainer exits 0: the workers, then the server, are stopped.
* A stop request (SIGINT / SIGTERM to the launcher) stops the trainer and the workers
  (SIGTERM, the grace period, SIGKILL; the trainer checkpoints), then the server.

The process table (``RUN_DIR/launcher.json``) is rewritten on every change and the starts
and exits are appended to ``RUN_DIR/logs/events.jsonl``.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

from rlax_core.errors import RlaxError
from rlax_core.kit.launcher import ProcessTable, append_event, take_preempting, write_table
from rlax_launchers.local.config import LocalLauncherConfig
from rlax_launchers.local.supervised import SupervisedProcess

BAD_CONFIG_EXIT = 2
POLL_S = 0.1
_READY_MARKER = "serving "  # what `rlax serve` prints once clients can connect


class Supervisor:
    """Runs and restarts the processes of one run.

    Args:
        processes: the transport server (if any) first, then the trainer and the workers.
        run_dir: the run directory.
        config: the launcher's settings.
        env: the environment of every process.
    """

    def __init__(
        self,
        processes: list[SupervisedProcess],
        run_dir: Path,
        config: LocalLauncherConfig,
        env: dict[str, str],
    ) -> None:
        self.processes = processes
        self.run_dir = run_dir
        self.config = config
        self.env = env
        self._table_text = ""

    def run(self, stop: threading.Event) -> bool:
        """Supervises until the trainer finishes (True) or ``stop`` is set (False).

        Raises:
            RlaxError: a process has a bad config, crashes in a loop, or the transport
                server does not start; everything was stopped first.
        """
        try:
            servers = [p for p in self.processes if p.role == "transport"]
            for server in servers:
                self._start(server)
                self._wait_ready(server, stop)
            for process in self.processes:
                if process not in servers and not stop.is_set():
                    self._start(process)
            while not stop.is_set():
                if self._tick():
                    return True
                time.sleep(POLL_S)
            return False
        finally:
            self.shutdown()

    def shutdown(self) -> None:
        """Stops the trainer and the workers, then the transport server (each its group)."""
        grace = self.config.stop_grace_s
        clients = [p for p in self.processes if p.role != "transport"]
        for process in clients:
            process.signal_group(signal.SIGTERM)  # all at once: they share the grace period
        for process in clients:
            self._stopped(process, process.stop(grace))
        for process in self.processes:
            if process.role == "transport":
                self._stopped(process, process.stop(grace))
        self._write_table()

    def _tick(self) -> bool:
        """One round: notice exits, start what is due; True once the trainer finished."""
        now = time.monotonic()
        finished = False
        for process in self.processes:
            if process.state == "running":
                code = process.poll()
                if code is not None:
                    finished = self._exited(process, code) or finished
            elif process.state == "restarting" and process.restart_at <= now:
                self._start(process)
        self._write_table()
        return finished

    def _exited(self, process: SupervisedProcess, code: int) -> bool:
        process.last_exit_code = code
        preempted = take_preempting(self.run_dir, process.name)
        ran_s = process.running_for_s()
        if process.role == "trainer" and code == 0:
            process.state = "stopped"
            append_event(
                self.run_dir, "exit", process.name, code=code, kind="finished", ran_s=ran_s
            )
            return True
        kind = "preempted" if preempted else "crashed"
        append_event(self.run_dir, "exit", process.name, code=code, kind=kind, ran_s=ran_s)
        if code == BAD_CONFIG_EXIT and not preempted:
            process.state = "failed"
            raise RlaxError(
                f"{process.name} exited with status 2 (a bad config or argument), so it is not "
                f"restarted; its log ({process.log_path}) ends with:\n{process.log_tail()}"
            )
        if preempted:
            process.preemptions += 1
            delay = self.config.restart_backoff_s
        else:
            process.crashes += 1
            if ran_s >= self.config.stable_after_s:
                process.failures_in_row = 0
            process.failures_in_row += 1
            if process.failures_in_row >= self.config.max_failures:
                process.state = "failed"
                raise RlaxError(
                    f"{process.name} died {process.failures_in_row} times in a row, each within "
                    f"{self.config.stable_after_s:g} s of its start (last exit status {code}); "
                    f"giving up. Its log ({process.log_path}) ends with:\n{process.log_tail()}"
                )
            delay = min(
                self.config.restart_backoff_s * 2 ** (process.failures_in_row - 1),
                self.config.max_backoff_s,
            )
        process.state = "restarting"
        process.restart_at = time.monotonic() + delay
        return False

    def _start(self, process: SupervisedProcess) -> None:
        process.start(self.env)
        append_event(
            self.run_dir, "start", process.name, pid=process.pid, restarts=process.restarts
        )
        self._write_table()

    def _stopped(self, process: SupervisedProcess, code: int | None) -> None:
        if code is not None and process.last_exit_code is None:
            process.last_exit_code = code
        if process.state != "failed":
            process.state = "stopped"

    def _wait_ready(self, server: SupervisedProcess, stop: threading.Event) -> None:
        deadline = time.monotonic() + self.config.server_start_timeout_s
        while not server.log_contains(_READY_MARKER):
            code = server.poll()
            if code is not None:
                server.state = "failed"
                raise RlaxError(
                    f"the transport server exited with status {code} at start; its log "
                    f"({server.log_path}) ends with:\n{server.log_tail()}"
                )
            if time.monotonic() > deadline or stop.is_set():
                if stop.is_set():
                    return
                raise RlaxError(
                    f"the transport server did not start within "
                    f"{self.config.server_start_timeout_s:g} s; its log ({server.log_path}) "
                    f"ends with:\n{server.log_tail()}"
                )
            time.sleep(POLL_S)

    def _write_table(self) -> None:
        table = ProcessTable(
            launcher_pid=os.getpid(),
            updated_at=time.time(),
            processes=tuple(p.entry() for p in self.processes),
        )
        text = table.model_dump_json(exclude={"updated_at"})
        if text != self._table_text:  # only on a change: the loop ticks ten times a second
            self._table_text = text
            write_table(self.run_dir, table)
