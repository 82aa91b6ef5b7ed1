"""The ``local`` launcher: a run as separate, supervised OS processes on this machine.

``rlax launch CONFIG`` with ``launcher: {type: local}`` starts the transport server
(``rlax serve param-server``), the trainer and the workers with exactly the command lines
the cloud launchers use (:mod:`rlax_launchers.role_commands`), supervises them
(:mod:`rlax_launchers.local.supervisor`) and returns when the trainer has finished.
``rlax status RUN_DIR`` and ``rlax preempt RUN_DIR WORKER`` work on the process table
it keeps in the run directory.
"""

from __future__ import annotations

import os
import shlex
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from rlax_core.config.run_config import RunConfigBase
from rlax_core.contracts import Launcher, ProcessStatus, RenderedArtifact
from rlax_core.errors import ConfigError, RlaxError
from rlax_core.kit.launcher import PREEMPTING_DIR, TABLE_FILE, collect_status, pid_alive, read_table
from rlax_core.plugins.registry import BuildContext, Registry
from rlax_launchers.local.config import LocalLauncherConfig
from rlax_launchers.local.supervised import SupervisedProcess
from rlax_launchers.local.supervisor import Supervisor
from rlax_launchers.role_commands import (
    trainer_command,
    transport_server_command,
    verifier_command,
    verifier_count,
    worker_command,
)

# Where a transport server keeps its state when the config names no folder, so that a
# restarted server still holds the published versions and the queued items.
TRANSPORT_STATE_DIR = "transport"
COMPILATION_CACHE_DIR = "jax_cache"
STATE_FIELDS = ("store_dir", "state_dir")  # nats: JetStream store; grpc: versions + journal


class LaunchStoppedError(RlaxError):
    """The launch was stopped by a signal; every process it started was stopped."""

    def __init__(self, signum: int) -> None:
        self.exit_code = 128 + signum
        super().__init__(
            f"stopped by {signal.Signals(signum).name}: every process of the run was stopped "
            "(the trainer with a checkpoint); launch it again to continue the run"
        )


class LocalLauncher(Launcher):
    """Starts and supervises a run's processes on this machine.

    Args:
        config: the launcher section of the run config.
        registry: the installed plugins (which transports have a server).
        config_path: the run config file the processes read.
    """

    def __init__(
        self, config: LocalLauncherConfig, registry: Registry, config_path: Path | None
    ) -> None:
        self.config = config
        self.registry = registry
        self.config_path = config_path

    def render(self, run_config: RunConfigBase, run_dir: Path) -> list[RenderedArtifact]:
        """The command of every process (the trainer last, in the foreground)."""
        artifacts = []
        for process in self.processes(run_config, run_dir):
            command = ["rlax", *process.command[3:]]  # as a user types it
            background = "" if process.role == "trainer" else " &"
            artifacts.append(
                RenderedArtifact(
                    kind="command", name=process.name, content=shlex.join(command) + background
                )
            )
        trainer = next(a for a in artifacts if a.name == "trainer")
        return [a for a in artifacts if a is not trainer] + [trainer]

    def processes(self, run_config: RunConfigBase, run_dir: Path) -> list[SupervisedProcess]:
        """The run's processes: transport server (if one is needed), trainer, workers, verifiers.

        Raises:
            ConfigError: the transport cannot cross processes (inproc), or no config file.
        """
        transport = run_config.transport
        if transport.type == "inproc":
            raise ConfigError(
                "launcher: {type: local} runs the trainer and the workers as separate "
                "processes, but transport.type inproc only works inside one process: set "
                "transport.type to nats or grpc, or drop the launcher section and run "
                "`rlax train CONFIG`"
            )
        if self.config_path is None:
            raise RlaxError(
                "the local launcher needs the run config's file (BuildContext.config_path): "
                "its processes read it"
            )
        config = str(self.config_path)
        directory = str(run_dir)
        rlax = [sys.executable, "-m", "rlax_core.cli"]
        processes = []
        if transport.type in self.registry.names("transport_server"):
            serve = transport_server_command(
                config, self._state_dir_args(transport, run_dir), run_dir=directory
            )
            processes.append(SupervisedProcess("transport", "transport", rlax + serve[1:], run_dir))
        trainer = trainer_command(
            config, directory, num_processes=1, coordinator="", process_id="0"
        )
        processes.append(
            SupervisedProcess("trainer", "trainer", [*rlax, *trainer[1:], "--no-progress"], run_dir)
        )
        for i in range(self.config.workers or run_config.rollout.workers):
            worker = worker_command(config, directory, f"w{i}")
            processes.append(SupervisedProcess(f"w{i}", "worker", rlax + worker[1:], run_dir))
        for i in range(verifier_count(run_config, self.config.verifiers)):
            verifier = verifier_command(config, directory, f"v{i}")
            processes.append(SupervisedProcess(f"v{i}", "verifier", rlax + verifier[1:], run_dir))
        return processes

    def launch(self, run_config: RunConfigBase, run_dir: Path) -> None:
        """Runs the processes until the trainer finishes.

        Raises:
            LaunchStoppedError: SIGINT or SIGTERM stopped the launch (exit 128 + signal).
            RlaxError: a process has a bad config or crashes in a loop; the run was stopped.
        """
        run_dir = run_dir.resolve()
        self._refuse_second_launcher(run_dir)
        processes = self._prepare(run_config, run_dir)
        for note in (run_dir / PREEMPTING_DIR).glob("*"):
            note.unlink()  # left by a preemption the previous launch never saw end
        stop = threading.Event()
        received: list[int] = []

        def on_signal(signum: int, _frame: object) -> None:
            received.append(signum)
            stop.set()

        previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        started = time.monotonic()
        names = ", ".join(p.name for p in processes)
        print(f"launching {names}; logs in {run_dir / 'logs'}", file=sys.stderr, flush=True)
        try:
            supervisor = Supervisor(processes, run_dir, self.config, self._environment(run_dir))
            finished = supervisor.run(stop)
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            self._release(processes)
        if not finished:
            raise LaunchStoppedError(received[0] if received else signal.SIGTERM)
        restarts = ", ".join(f"{p.name} {p.restarts}" for p in processes if p.restarts)
        print(
            f"run finished in {time.monotonic() - started:.0f} s; restarts: {restarts or 'none'}",
            file=sys.stderr,
        )

    def _prepare(self, run_config: RunConfigBase, run_dir: Path) -> list[SupervisedProcess]:
        """What :meth:`launch` supervises, with anything they need made first."""
        return self.processes(run_config, run_dir)

    def _environment(self, run_dir: Path) -> dict[str, str]:
        """The environment of every process: this one's, the config's ``env``, the cache."""
        cache = compilation_cache_env(self.config, run_dir)
        return {**cache, **os.environ, "PYTHONUNBUFFERED": "1", **self.config.env}

    def _release(self, processes: list[SupervisedProcess]) -> None:
        """Called once the supervised processes have stopped (nothing to undo here)."""

    def status(self, run_dir: Path) -> list[ProcessStatus]:
        """The processes of the launcher's table, with their versions and rates."""
        rows, table = collect_status(run_dir)
        entries = {entry.name: entry for entry in table.processes} if table else {}
        return [
            ProcessStatus(
                role=entries[row.name].role,
                name=row.name,
                state=entries[row.name].state,
                pid=row.pid,
                restarts=row.restarts,
                policy_version=row.policy_version,
                throughput=row.throughput,
            )
            for row in rows
            if row.name in entries  # status files of processes it did not start are not its
        ]

    def stop(self, run_dir: Path) -> None:
        """Asks the launcher to stop the run; if it is gone, stops its processes itself."""
        table = read_table(run_dir)
        if _is_rlax(table.launcher_pid) and table.launcher_pid != os.getpid():
            os.kill(table.launcher_pid, signal.SIGTERM)
            deadline = time.monotonic() + 2 * self.config.stop_grace_s + 30
            while pid_alive(table.launcher_pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            return
        for entry in table.processes:
            if entry.pgid is not None and _is_rlax(entry.pid):
                os.killpg(entry.pgid, signal.SIGTERM)

    def _refuse_second_launcher(self, run_dir: Path) -> None:
        if not (run_dir / TABLE_FILE).exists():
            return
        launcher = read_table(run_dir).launcher_pid
        if launcher != os.getpid() and _is_rlax(launcher):
            raise ConfigError(
                f"{run_dir} is being run by another launcher (pid {launcher}); stop it with "
                "`rlax launch CONFIG --stop`, or choose another --run-dir"
            )

    @staticmethod
    def _state_dir_args(transport: Any, run_dir: Path) -> list[str]:
        """``--set server.<folder>=RUN_DIR/transport`` where the config keeps no state."""
        server = getattr(transport, "server", None)
        for field in STATE_FIELDS:
            if server is not None and hasattr(server, field) and getattr(server, field) is None:
                return ["--set", f"server.{field}={run_dir / TRANSPORT_STATE_DIR}"]
        return []


def compilation_cache_env(config: LocalLauncherConfig, run_dir: Path) -> dict[str, str]:
    """The variables that share ``RUN_DIR/jax_cache`` among the run's processes (none when
    ``compilation_cache`` is off); the caller's own settings go over them."""
    if not config.compilation_cache:
        return {}
    return {
        "JAX_COMPILATION_CACHE_DIR": str(run_dir / COMPILATION_CACHE_DIR),
        # Small programs too: on a busy machine they are what a restart waits for.
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
    }


def _is_rlax(pid: int | None) -> bool:
    """Whether ``pid`` is alive and runs RLAX (not a stranger that reused the pid)."""
    if not pid_alive(pid):
        return False
    try:
        return b"rlax" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def make_local_launcher(config: LocalLauncherConfig, context: BuildContext) -> LocalLauncher:
    """Builds the launcher for the run config file in ``context.config_path``."""
    return LocalLauncher(config, context.registry, context.config_path)
