"""One slot of a pool: a zygote process, its control socket and its work area.

A slot runs one program at a time. Its runs use the slot's own uid (when the pool can
switch uids), so a run can neither signal nor read a run of another slot, and the
zygote can kill everything of that uid when a run ends.
"""

from __future__ import annotations

import os
import select
import shutil
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import protocol

# (slot index, control fd number, slot's host directory) -> argv starting the zygote.
ZygoteCommand = Callable[[int, int, Path], list[str]]


class SlotBrokenError(RuntimeError):
    """The zygote died or stopped answering; the slot must be restarted."""


class Slot:
    """A zygote plus the directories its runs use.

    Args:
        index: position in the pool.
        shared_tmp_dirs: temp dirs the runs share with other slots (a container's /tmp):
            after each run, what this slot's uid left there is removed.
        command: builds the argv that starts the zygote.
        host_dir: the slot's work area as this process sees it.
        inner_dir: the same directory as the zygote sees it.
        uid: the unprivileged uid of this slot's runs (None: keep the current uid).
    """

    def __init__(
        self,
        index: int,
        command: ZygoteCommand,
        host_dir: Path,
        inner_dir: str,
        uid: int | None,
        shared_tmp_dirs: tuple[str, ...] = (),
    ) -> None:
        self.index = index
        self.shared_tmp_dirs = shared_tmp_dirs
        self.command = command
        self.host_dir = host_dir
        self.inner_dir = inner_dir
        self.uid = uid
        self.process: subprocess.Popen[bytes] | None = None
        self.sock: socket.socket | None = None
        self._runs = 0

    def start(self) -> None:
        """Starts (or restarts) the zygote."""
        self.stop()
        for sub in ("tmp", "shm"):
            (self.host_dir / sub).mkdir(parents=True, exist_ok=True)
            os.chmod(self.host_dir / sub, 0o1777)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        log = open(self.host_dir.parent / f"zygote-{self.index}.log", "ab")  # noqa: SIM115
        try:
            self.process = subprocess.Popen(
                self.command(self.index, theirs.fileno(), self.host_dir),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                pass_fds=(theirs.fileno(),),
                env={},
                start_new_session=True,
            )
        finally:
            theirs.close()
            log.close()
        self.sock = ours

    def stop(self) -> None:
        """Closes the control socket (the zygote then kills its runs and exits)."""
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if self.process is not None:
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.process = None

    def new_run_dir(self) -> tuple[Path, str]:
        """A fresh, empty work directory for one run: (host path, zygote's path)."""
        self._runs += 1
        name = f"run-{self._runs}"
        host = self.host_dir / name
        host.mkdir(mode=0o700)
        if self.uid is not None:
            os.chown(host, self.uid, self.uid)
        return host, f"{self.inner_dir}/{name}"

    def wipe(self, run_dir: Path) -> None:
        """Removes a run's directory and whatever the run left in the slot's tmp dirs."""
        shutil.rmtree(run_dir, ignore_errors=True)
        for sub in ("tmp", "shm"):
            for entry in (self.host_dir / sub).iterdir():
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)
        for shared in self.shared_tmp_dirs:
            _remove_owned_by(Path(shared), self.uid)

    def send(self, message: dict[str, Any], fds: list[int] | None = None) -> None:
        """Sends a message to the zygote; raises SlotBrokenError if it is gone."""
        if self.sock is None:
            raise SlotBrokenError(f"slot {self.index} is not started")
        try:
            protocol.send(self.sock, message, fds)
        except OSError as exc:
            raise SlotBrokenError(f"slot {self.index}: zygote unreachable ({exc})") from exc

    def receive(self) -> dict[str, Any]:
        """Receives the zygote's next message; raises SlotBrokenError if it is gone."""
        assert self.sock is not None
        try:
            message, fds = protocol.receive(self.sock)
        except OSError as exc:
            raise SlotBrokenError(f"slot {self.index}: zygote unreachable ({exc})") from exc
        for fd in fds:
            os.close(fd)
        if message is None:
            raise SlotBrokenError(f"slot {self.index}: zygote exited{self._exit_note()}")
        return message

    def _exit_note(self) -> str:
        if self.process is None:
            return ""
        try:
            code = self.process.wait(timeout=1)
        except subprocess.TimeoutExpired:
            return ""
        log = self.host_dir.parent / f"zygote-{self.index}.log"
        tail = log.read_bytes()[-500:].decode(errors="replace") if log.exists() else ""
        return f" with status {code}" + (f": {tail.strip()}" if tail.strip() else "")


def wait_until_ready(slot: Slot, timeout_s: float = 30.0) -> None:
    """Waits until the zygote answers a ping (start-up errors surface here, clearly)."""
    slot.send({"ping": True})
    assert slot.sock is not None
    poller = select.poll()
    poller.register(slot.sock, select.POLLIN)
    if not poller.poll(int(timeout_s * 1000)):
        raise SlotBrokenError(f"slot {slot.index}: zygote did not start in {timeout_s:.0f}s")
    reply = slot.receive()
    if not reply.get("pong"):
        raise SlotBrokenError(f"slot {slot.index}: unexpected zygote reply {reply!r}")


def _remove_owned_by(folder: Path, uid: int | None) -> None:
    if uid is None or not folder.is_dir():
        return
    for entry in folder.iterdir():
        try:
            if entry.lstat().st_uid != uid:
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
        except OSError:
            continue
