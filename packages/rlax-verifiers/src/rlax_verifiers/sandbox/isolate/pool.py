"""The driver's side of a pool of slots: hand a run to a zygote and capture its output.

The driver creates the run's pipes and stdin itself and passes the descriptors to the
zygote, so the program's output flows straight to the driver, which reads stdout,
stderr and the result channel concurrently, each up to its cap. Past the cap of stdout
or the channel (what a judge compares) it asks the zygote to kill the run: an output
bomb ends at once instead of at its time limit. stderr is never compared, so writing
much of it is no fault: past its cap the driver keeps draining it and keeps its tail
(where a traceback or an out-of-memory message is), and the run goes on.
"""

from __future__ import annotations

import itertools
import os
import queue
import select
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .slot import Slot, SlotBrokenError, wait_until_ready

_REPORT_GRACE_S = 10.0  # beyond the wall limit, how long the zygote may take to report
_EOF_GRACE_S = 2.0


@dataclass
class RunSpec:
    """One run: what to put in its work directory, how to start it, and its limits.

    Attributes:
        mode: "python" (run ``path`` in the warm interpreter) or "exec" (``argv``).
        files: name -> (content, permission bits), written into the fresh work dir.
        stdin: the run's standard input.
        wall_s: wall-clock limit; the zygote kills the run's processes when it passes.
        limits: rlimits, see :func:`rlax_verifiers.sandbox.isolate.child._apply_limits`.
        output_limit_bytes: cap on stdout, on stderr and on the channel, each.
        channel: open fd 3 as the result channel.
        collect: a file to bring back from the work dir after the run (a compiled binary).
    """

    mode: str
    files: dict[str, tuple[bytes, int]]
    stdin: bytes
    wall_s: float
    limits: dict[str, Any]
    output_limit_bytes: int
    channel: bool = False
    path: str = "main.py"
    argv: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    collect: str | None = None
    collect_limit_bytes: int = 64 << 20


class Pool:
    """Slots and a queue of the free ones; ``execute`` is safe to call from many threads."""

    def __init__(self, slots: Sequence[Slot]) -> None:
        self.slots = list(slots)
        self._free: queue.Queue[Slot] = queue.Queue()
        self._ids = itertools.count(1)

    def start(self) -> None:
        """Starts every zygote and waits until each answers."""
        for slot in self.slots:
            slot.start()
        for slot in self.slots:
            wait_until_ready(slot)
            self._free.put(slot)

    def close(self) -> None:
        """Stops every zygote (each kills whatever its run left)."""
        for slot in self.slots:
            slot.stop()

    def execute(self, spec: RunSpec) -> dict[str, Any]:
        """Runs ``spec`` on the next free slot; an infrastructure failure comes back as
        ``sandbox_error`` (and the slot is restarted), never as an exception."""
        slot = self._free.get()
        try:
            return _execute_on(slot, spec, next(self._ids))
        except SlotBrokenError as exc:
            try:
                slot.start()
                wait_until_ready(slot)
            except (SlotBrokenError, OSError):
                pass  # the next run on this slot reports the failure again
            return {"sandbox_error": str(exc)}
        except OSError as exc:  # e.g. a full work area while writing the run's files
            return {"sandbox_error": f"run setup failed on slot {slot.index}: {exc}"}
        finally:
            self._free.put(slot)


def _execute_on(slot: Slot, spec: RunSpec, run_id: int) -> dict[str, Any]:
    host_dir, inner_dir = slot.new_run_dir()
    readers: dict[int, _Capture] = {}
    try:
        for name, (content, mode) in spec.files.items():
            _write_file(host_dir / name, content, mode, slot.uid)
        stdin = os.memfd_create("stdin", os.MFD_CLOEXEC)
        _write_all(stdin, spec.stdin)
        os.lseek(stdin, 0, os.SEEK_SET)
        passed = [stdin]
        for name in ("stdout", "stderr", "channel") if spec.channel else ("stdout", "stderr"):
            read_end, write_end = os.pipe2(os.O_CLOEXEC)
            readers[read_end] = _Capture(name, spec.output_limit_bytes, tail=name == "stderr")
            passed.append(write_end)
        job = {
            "id": run_id,
            "mode": spec.mode,
            "path": spec.path,
            "argv": spec.argv,
            "env": spec.env,
            "workdir": inner_dir,
            "uid": slot.uid,
            "limits": spec.limits,
            "wall_s": spec.wall_s,
        }
        try:
            slot.send(job, passed)
        finally:
            for fd in passed:
                os.close(fd)
        outcome = _collect(slot, run_id, readers, spec.wall_s)
        if spec.collect and outcome.get("exit_code") == 0:
            outcome["collected"] = _read_file(host_dir / spec.collect, spec.collect_limit_bytes)
        return outcome
    finally:
        for fd in readers:
            os.close(fd)
        slot.wipe(host_dir)


def _collect(
    slot: Slot, run_id: int, readers: dict[int, _Capture], wall_s: float
) -> dict[str, Any]:
    assert slot.sock is not None
    poller = select.poll()
    for fd in readers:
        poller.register(fd, select.POLLIN)
    poller.register(slot.sock, select.POLLIN)
    open_fds = set(readers)
    report: dict[str, Any] | None = None
    deadline = time.monotonic() + wall_s + _REPORT_GRACE_S
    kill_sent = False
    while open_fds or report is None:
        now = time.monotonic()
        if report is not None:
            deadline = min(deadline, now + _EOF_GRACE_S)
        if now > deadline:
            if report is None:
                raise SlotBrokenError(
                    f"slot {slot.index}: no report {wall_s + _REPORT_GRACE_S:.0f}s "
                    "after the run started"
                )
            break  # output still open after every process was killed: stop reading
        for fd, _event in poller.poll(max(1, int((deadline - now) * 1000))):
            if fd == slot.sock.fileno():
                report = slot.receive()
                poller.unregister(fd)
                continue
            data = os.read(fd, 1 << 16)
            if not data:
                poller.unregister(fd)
                open_fds.discard(fd)
                continue
            capture = readers[fd]
            capture.add(data)
            if capture.truncated and capture.kills and not kill_sent and report is None:
                slot.send({"kill": run_id})
                kill_sent = True
    assert report is not None
    result: dict[str, Any] = {
        "exit_code": report["exit_code"],
        "signal": report["signal"],
        "wall_s": report["wall_s"],
        "cpu_s": report["cpu_s"],
        "peak_memory_mb": report["maxrss_kb"] / 1024,
        "timed_out": report["timed_out"],
        "sandbox_error": report.get("setup_error"),
    }
    for capture in readers.values():
        result[capture.name] = capture.text()
        result[f"{capture.name}_truncated"] = capture.truncated
    return result


class _Capture:
    """Bytes of one stream, kept up to ``limit``; more sets ``truncated``.

    Args:
        name: the stream.
        limit: bytes kept at most.
        tail: keep the last ``limit`` bytes instead of the first, and let the run go on
            past the limit (``kills`` is False).
    """

    def __init__(self, name: str, limit: int, *, tail: bool = False) -> None:
        self.name = name
        self.limit = limit
        self.tail = tail
        self.kills = not tail
        self.kept = bytearray()
        self.truncated = False

    def add(self, data: bytes) -> None:
        """Keeps what fits under the limit; marks the capture truncated past it."""
        if self.tail:
            self.kept += data
            if len(self.kept) > self.limit:
                self.truncated = True
                del self.kept[: len(self.kept) - self.limit]
            return
        room = self.limit - len(self.kept)
        if len(data) > room:
            self.truncated = True
            data = data[: max(room, 0)]
        self.kept += data

    def text(self) -> str:
        """What was kept, as UTF-8 with invalid bytes replaced."""
        return bytes(self.kept).decode("utf-8", errors="replace")


def _write_file(path: Any, content: bytes, mode: int, uid: int | None) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    try:
        _write_all(fd, content)
        if uid is not None:
            os.fchown(fd, uid, uid)
        os.fchmod(fd, mode)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _read_file(path: Any, limit: int) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        chunks, size = [], 0
        while size <= limit and (chunk := os.read(fd, 1 << 20)):
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks) if size <= limit else None
    finally:
        os.close(fd)
