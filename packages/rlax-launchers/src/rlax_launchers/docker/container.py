"""One container the docker launcher supervises, behind the local launcher's interface.

:class:`SupervisedContainer` is a :class:`~rlax_launchers.local.supervised.SupervisedProcess`
whose incarnations are starts of one container, so the local launcher's
:class:`~rlax_launchers.local.supervisor.Supervisor` (back-off, crash loops, preemptions,
the process table) supervises containers unchanged. The container is created at its
first start and started again after each exit: its filesystem is made once (with the
vfs storage driver, making one copies the whole image).

It runs ``docker-init`` as its first process, which forwards signals to RLAX and reaps
what RLAX starts (a nats-server). Its host pid is recorded as the process's pid and
process group, so ``rlax preempt`` (SIGTERM to the group, grace, SIGKILL) and a SIGKILL
from outside reach the container as they reach a local process: SIGKILL to a pid
namespace's first process ends the whole container. Its output (``docker logs``) is
copied into ``RUN_DIR/logs/<name>.log``, as a local process's is.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from rlax_core.kit.launcher import ProcessEntry, ProcessRole, pid_alive
from rlax_launchers.local.supervised import SupervisedProcess

_WAIT_S = 30  # for an exited container's status, which the engine has at once


class SupervisedContainer(SupervisedProcess):
    """A named container of the run and its history of starts and exits.

    Args:
        name: unique in the run ('transport', 'trainer', 'w0', ...).
        role: what it does.
        command: its argv inside the container.
        run_dir: the run directory (its log is ``logs/<name>.log`` there).
        client: the docker-py client of the engine.
        container_name: the container's name on the engine.
        options: the rest of ``client.containers.create``'s arguments (image, mounts,
            labels, limits, network); ``environment`` comes from :meth:`start`.
    """

    def __init__(
        self,
        name: str,
        role: ProcessRole,
        command: list[str],
        run_dir: Path,
        *,
        client: Any,
        container_name: str,
        options: dict[str, Any],
    ) -> None:
        super().__init__(name, role, command, run_dir)
        self.client = client
        self.container_name = container_name
        self.options = options
        self._container: Any = None
        self._pid: int | None = None
        self._exit_code: int | None = None
        self._copier: threading.Thread | None = None

    @property
    def pid(self) -> int | None:
        """Host pid of the container's first process (also its process group)."""
        return self._pid

    def start(self, env: dict[str, str]) -> None:
        """Starts the container again (creating it the first time); output to the log."""
        with self._new_incarnation():
            self.create(env)
            self._container.start()
            self._container.reload()
        state = self._container.attrs["State"]
        self._pid = state["Pid"] or None
        self._exit_code = None
        self._copier = threading.Thread(
            target=self._copy_output,
            args=(self._container.id, _timestamp(state["StartedAt"])),
            name=f"logs-{self.name}",
            daemon=True,
        )
        self._copier.start()
        self._running()

    def create(self, env: dict[str, str]) -> None:
        """Creates the container, unless it exists (replacing one a dead launcher left)."""
        import docker.errors

        if self._container is not None:
            return
        with contextlib.suppress(docker.errors.NotFound):
            self.client.containers.get(self.container_name).remove(force=True)
        self._container = self.client.containers.create(
            command=self.command, name=self.container_name, environment=env, init=True,
            detach=True, **self.options,
        )  # fmt: skip

    def _copy_output(self, container_id: str, since: float) -> None:
        """Appends this incarnation's output to the log until the container stops."""
        import docker

        # A client of its own without a read timeout: a container may be quiet for long.
        streaming = docker.from_env(timeout=None)
        try:
            with contextlib.suppress(Exception), self.log_path.open("ab") as log:
                container = streaming.containers.get(container_id)
                for chunk in container.logs(stream=True, follow=True, since=since):
                    log.write(chunk)
                    log.flush()
        finally:
            streaming.close()

    def poll(self) -> int | None:
        """The exit status once the current incarnation has ended (137 after SIGKILL)."""
        if self._container is None or self._pid is None:
            return None
        if self._exit_code is None:
            if pid_alive(self._pid):
                return None
            import docker.errors

            try:
                self._exit_code = int(self._container.wait(timeout=_WAIT_S)["StatusCode"])
            except docker.errors.NotFound:  # removed from outside: it is gone
                self._exit_code = 128 + signal.SIGKILL
            if self._copier is not None:
                self._copier.join(timeout=5)
        return self._exit_code

    def signal_group(self, signum: int) -> None:
        """Sends ``signum`` to the container (docker-init passes it to RLAX)."""
        import docker.errors

        if self._container is not None and self.poll() is None:
            with contextlib.suppress(docker.errors.APIError):
                self._container.kill(signal=signum)

    def kill(self) -> int | None:
        """SIGKILL to the container; returns its exit status (None if never started)."""
        import docker.errors

        if self._container is None:
            return None
        self.signal_group(signal.SIGKILL)
        with contextlib.suppress(docker.errors.APIError):
            self._container.wait(timeout=_WAIT_S)  # the engine has torn it down
        while self._pid is not None and self.poll() is None:  # the pid outlives it briefly
            time.sleep(0.01)
        return self.poll()

    def entry(self) -> ProcessEntry:
        """The process table's line, with the container's name."""
        return super().entry().model_copy(update={"container": self.container_name})

    def remove(self) -> None:
        """Removes the container (killing it if it still runs)."""
        import docker.errors

        if self._container is not None:
            with contextlib.suppress(docker.errors.NotFound):
                self._container.remove(force=True)
            self._container = None


def _timestamp(started_at: str) -> float:
    """Docker's RFC 3339 time with nanoseconds, as Unix seconds (microseconds kept)."""
    head, _, fraction = started_at.rstrip("Z").partition(".")
    stamp = datetime.fromisoformat(head + "+00:00").timestamp()
    return stamp + float(f"0.{fraction[:6] or 0}")
