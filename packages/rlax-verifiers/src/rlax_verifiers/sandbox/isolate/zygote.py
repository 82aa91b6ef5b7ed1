"""The zygote: a warm interpreter inside the isolation that forks one child per run.

Started once per slot, it imports everything a run needs, then loops: receive a job
(limits and descriptors only, never a program's source or data), fork, supervise the
child until it exits or its wall limit passes, kill everything the run left behind, and
report. It is the run's "outside": it kills the process group at the wall limit, kills
setsid'd daemons too (as a child subreaper every orphan of the run becomes its child,
and with a slot uid it also kills every process of that uid), and never runs program
code itself. It exits, killing its runs, when the driver's socket closes.
"""

from __future__ import annotations

import contextlib
import gc
import os
import select
import signal
import socket
import sys
import time
from typing import Any

from . import child, protocol

_PR_SET_CHILD_SUBREAPER = 36


def main() -> None:
    """Entry point: ``python3 -I -c '...; main()' --control-fd N``."""
    control_fd = int(sys.argv[sys.argv.index("--control-fd") + 1])
    sock = socket.socket(fileno=control_fd)
    if child._LIBC is not None:
        child._LIBC.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    # The interpreter path a run's Python sees, without this package's own folder.
    run_path = [p for p in sys.path if p and p != sys.argv[sys.argv.index("--path") + 1]]
    gc.collect()
    gc.freeze()  # children share these pages instead of copying them on first GC
    job, fds, report_fd = _serve(sock)
    child.run(job, fds, report_fd, run_path)


def _serve(sock: socket.socket) -> tuple[dict[str, Any], list[int], int]:
    """Serves jobs forever; returns only inside a forked child, with its job."""
    while True:
        message, fds = protocol.receive(sock)
        if message is None:
            _kill_leftovers(None)
            os._exit(0)
        if "kill" in message:  # arrived after its run had ended
            continue
        if message.get("ping"):
            protocol.send(sock, {"pong": True})
            continue
        report_r, report_w = os.pipe2(os.O_CLOEXEC)
        started = time.monotonic()
        pid = os.fork()
        if pid == 0:
            os.close(report_r)
            return message, fds, report_w
        os.close(report_w)
        for fd in fds:
            os.close(fd)
        outcome = _supervise(sock, message, pid, started)
        outcome["setup_error"] = _read_report(report_r)
        protocol.send(sock, outcome)


def _supervise(
    sock: socket.socket, job: dict[str, Any], pid: int, started: float
) -> dict[str, Any]:
    pidfd = os.pidfd_open(pid)
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    poller.register(sock, select.POLLIN)
    deadline = started + float(job["wall_s"])
    timed_out = killed = False
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                _kill_group(pid)
                break
            events = dict(poller.poll(max(1, int(remaining * 1000))))
            if pidfd in events:
                break
            if sock.fileno() in events:
                message, fds = protocol.receive(sock)
                for fd in fds:
                    os.close(fd)
                if message is None:  # the driver is gone: end everything, then ourselves
                    _kill_group(pid)
                    _kill_leftovers(job.get("uid"))
                    os._exit(0)
                if message.get("kill") == job["id"]:
                    killed = True
                    _kill_group(pid)
                    break
        _pid, status, usage = os.wait4(pid, 0)
    finally:
        os.close(pidfd)
    wall = time.monotonic() - started
    _kill_group(pid)
    _kill_leftovers(job.get("uid"))
    return {
        "id": job["id"],
        "exit_code": os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else None,
        "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "maxrss_kb": usage.ru_maxrss,
        "timed_out": timed_out,
        "killed": killed,
    }


def _kill_group(pgid: int) -> None:
    for kill in (os.killpg, os.kill):  # the child may not have called setsid() yet
        with contextlib.suppress(ProcessLookupError, PermissionError):
            kill(pgid, signal.SIGKILL)


def _kill_leftovers(uid: int | None) -> None:
    """Kills and reaps every process the run left, however it tried to escape."""
    me = os.getpid()
    for attempt in range(1000):
        _reap()
        leftovers = _descendants(me)
        if not leftovers:
            return
        if uid is not None:
            _kill_uid(uid)
        for pid in leftovers:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(min(0.001 * attempt, 0.05))
    raise RuntimeError("processes of a finished run survived 1000 kill rounds")


def _kill_uid(uid: int) -> None:
    """kill(-1) as the slot's uid: every process of that uid, atomically w.r.t. forks."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            os.kill(-1, signal.SIGKILL)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def _descendants(root: int) -> list[int]:
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry)] = int(fields[1])
    found = []
    for pid in parents:
        ancestor, hops = parents.get(pid), 0
        while ancestor is not None and ancestor != root and hops < 4096:
            ancestor, hops = parents.get(ancestor), hops + 1
        if ancestor == root:
            found.append(pid)
    return found


def _reap() -> None:
    while True:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _read_report(fd: int) -> str | None:
    try:
        os.set_blocking(fd, False)
        data = os.read(fd, 4096)
    except (BlockingIOError, OSError):
        data = b""
    finally:
        os.close(fd)
    return data.decode(errors="replace") or None
