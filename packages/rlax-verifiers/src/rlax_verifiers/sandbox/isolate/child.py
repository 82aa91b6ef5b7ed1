"""The child a zygote forks for one run: it isolates itself, then becomes the program.

Order matters. The child first leaves the zygote's session (so the whole run is one
process group the zygote can kill), puts the run's descriptors on 0-3 and closes every
other, drops to the slot's unprivileged uid, lowers its rlimits, enters the run's work
directory and forbids gaining privileges again. Only then does program code run: a
binary through ``execve`` with an empty environment, or Python source in this very
interpreter (already warm, which is why a run costs a fork instead of an interpreter
start-up). Any failure before that point is written to the report pipe, so the zygote
reports a sandbox error instead of blaming the program.
"""

from __future__ import annotations

import contextlib
import io
import os
import resource
import sys
import traceback
import types
from typing import Any, NoReturn

STDIN, STDOUT, STDERR, CHANNEL = 0, 1, 2, 3
SETUP_FAILED = 126
_PR_SET_NO_NEW_PRIVS = 38
_MB = 1 << 20

try:  # ctypes may be missing from a minimal interpreter; no_new_privs is then skipped
    import ctypes

    _LIBC: Any = ctypes.CDLL(None, use_errno=True)
except (ImportError, OSError):  # pragma: no cover - depends on the image
    _LIBC = None


def run(job: dict[str, Any], fds: list[int], report_fd: int, sys_path: list[str]) -> NoReturn:
    """Isolates this freshly forked process and runs the job's program in it."""
    try:
        _isolate(job, fds, report_fd)
        if job["mode"] == "exec":
            argv = job["argv"]
            os.execve(argv[0], argv, job.get("env", {}))
    except BaseException as exc:
        _report(report_fd, f"run setup failed: {type(exc).__name__}: {exc}")
        os._exit(SETUP_FAILED)
    os.close(report_fd)
    _run_python(job["path"], sys_path)


def _isolate(job: dict[str, Any], fds: list[int], report_fd: int) -> None:
    os.setsid()
    stdin, stdout, stderr = fds[0], fds[1], fds[2]
    channel = fds[3] if len(fds) > 3 else None
    for source, target in ((stdin, STDIN), (stdout, STDOUT), (stderr, STDERR)):
        os.dup2(source, target)
    if channel is not None:
        os.dup2(channel, CHANNEL)
    else:
        _close(CHANNEL)  # in the zygote this is its control socket
    # Keep 0-3 (or 0-2) and the report pipe; nothing else of the zygote's survives.
    first = 4 if channel is not None else 3
    os.closerange(first, report_fd)
    os.closerange(report_fd + 1, _max_fd())
    uid = job.get("uid")
    if uid is not None:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    os.umask(0o077)  # files a run leaves in a shared /tmp stay unreadable to other slots
    _apply_limits(job["limits"], python=job["mode"] == "python")
    os.chdir(job["workdir"])
    if _LIBC is not None and _LIBC.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    os.environ.clear()


def _apply_limits(limits: dict[str, Any], *, python: bool) -> None:
    cpu = int(limits["cpu_s"])
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits["file_size_mb"] * _MB,) * 2)
    resource.setrlimit(resource.RLIMIT_NOFILE, (limits["open_files"],) * 2)
    resource.setrlimit(resource.RLIMIT_NPROC, (limits["processes"],) * 2)
    resource.setrlimit(resource.RLIMIT_STACK, (limits["stack_mb"] * _MB,) * 2)
    address_space = limits.get("address_space_mb")
    if address_space is not None:
        budget = address_space * _MB
        if python:
            # The program's budget comes on top of the interpreter already mapped here.
            budget += _virtual_size()
        resource.setrlimit(resource.RLIMIT_AS, (budget, budget))


def _run_python(path: str, sys_path: list[str]) -> NoReturn:
    """Runs ``path`` as ``python3 path`` would, in this interpreter."""
    _fresh_std_streams()
    workdir = os.getcwd()
    sys.argv = [path]
    sys.path[:] = [workdir, *sys_path]
    main = types.ModuleType("__main__")
    main.__dict__.update({"__file__": os.path.join(workdir, path), "__builtins__": __builtins__})
    sys.modules["__main__"] = main
    with open(path, "rb") as handle:
        source = handle.read()
    try:
        code = compile(source, main.__file__, "exec")
    except (SyntaxError, ValueError) as exc:
        traceback.print_exception(type(exc), exc, None)
        _exit_like_the_interpreter(1)
    del source, handle
    try:
        exec(code, main.__dict__)
    except SystemExit as exc:
        _exit_like_the_interpreter(_exit_status(exc))
    except BaseException as exc:
        # Start the report in the program, as the interpreter's own does.
        tb = exc.__traceback__.tb_next if exc.__traceback__ else None
        sys.excepthook(type(exc), exc.with_traceback(tb), tb)
        _exit_like_the_interpreter(1)
    _exit_like_the_interpreter(0)


def _exit_like_the_interpreter(status: int) -> NoReturn:
    """The interpreter's exit sequence, without tearing down the modules.

    Like ``Py_FinalizeEx``: wait for non-daemon threads, run ``atexit`` callbacks, flush
    stdout and stderr (a failed flush turns status 0 into 120). Tearing down modules
    costs most of a forked run's time and only matters to ``__del__`` methods still
    alive at exit, so the process ends with ``os._exit`` instead.
    """
    try:
        threading = sys.modules.get("threading")
        if threading is not None:
            threading._shutdown()  # type: ignore[attr-defined]
        import atexit

        atexit._run_exitfuncs()
    except SystemExit as exc:
        status = _exit_status(exc)
    except BaseException:
        traceback.print_exc()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except BaseException:
            status = status or 120
    os._exit(status)


def _exit_status(exc: SystemExit) -> int:
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    with contextlib.suppress(BaseException):
        print(code, file=sys.stderr)
    return 1


def _fresh_std_streams() -> None:
    def text(fd: int, mode: str, errors: str, line_buffering: bool) -> io.TextIOWrapper:
        raw = io.FileIO(fd, mode, closefd=False)
        buffered = io.BufferedReader(raw) if mode == "rb" else io.BufferedWriter(raw)
        return io.TextIOWrapper(
            buffered, encoding="utf-8", errors=errors, line_buffering=line_buffering
        )

    sys.stdin = sys.__stdin__ = text(STDIN, "rb", "surrogateescape", False)
    sys.stdout = sys.__stdout__ = text(STDOUT, "wb", "surrogateescape", False)
    sys.stderr = sys.__stderr__ = text(STDERR, "wb", "backslashreplace", True)


def _virtual_size() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def _max_fd() -> int:
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else 1 << 16


def _close(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)


def _report(fd: int, message: str) -> None:
    with contextlib.suppress(OSError):
        os.write(fd, message.encode(errors="replace")[:4096])
