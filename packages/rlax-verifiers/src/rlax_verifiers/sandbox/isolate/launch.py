"""Commands that start a zygote: inside bubblewrap namespaces, or as a plain process.

``bwrap_command`` is the local backend's isolation: new network (no interfaces but a
down loopback), pid, ipc, uts and mount namespaces; a read-only view of only the system
directories a program needs; the slot's work area, ``/tmp`` and ``/dev/shm`` bound from
the slot's size-capped tmpfs; a private ``/proc``; a minimal ``/dev``. The zygote keeps
only the capabilities it uses (switching uids and killing its runs), and every run drops
even those with the uid switch. ``plain_command`` is for places that are already an
isolation boundary of their own: a container, a Lambda execution environment.

No ``--die-with-parent``: its signal fires when the *thread* that started bwrap ends,
and slots are restarted from worker threads. A zygote exits by itself when its driver's
socket closes, which also happens when the driver process dies.
"""

from __future__ import annotations

import os
from pathlib import Path

ISOLATE_PARENT = "/opt/rlax"  # where a sandbox sees this package (as "isolate")
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_ETC_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives")


def bootstrap(isolate_parent: str) -> list[str]:
    """The ``-c`` program and arguments that import this package and run the zygote."""
    code = (
        f"import sys; sys.path.insert(0, {isolate_parent!r}); "
        "from isolate.zygote import main; main()"
    )
    return ["-I", "-c", code, "--path", isolate_parent]


def plain_command(python: str, isolate_dir: Path, control_fd: int) -> list[str]:
    """Starts the zygote as a child process, for use inside a container or Lambda."""
    return [python, *bootstrap(str(isolate_dir.parent)), "--control-fd", str(control_fd)]


def bwrap_namespaces(
    bwrap: str, python: str, caps: tuple[str, ...], extra_ro_binds: tuple[str, ...] = ()
) -> list[str]:
    """The start of a bwrap command: fresh namespaces, only ``caps`` kept, a read-only
    view of the system directories (and ``extra_ro_binds``), a private /proc and /dev."""
    argv = [
        bwrap,
        "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
        "--unshare-cgroup-try", "--new-session",
        "--hostname", "sandbox", "--clearenv", "--cap-drop", "ALL",
    ]  # fmt: skip
    for cap in caps:
        argv += ["--cap-add", cap]
    for path in _SYSTEM_DIRS:
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    for path in (*_ETC_FILES, *extra_ro_binds, *_outside_usr(python)):
        if os.path.exists(path):
            argv += ["--ro-bind", path, path]
    return [*argv, "--proc", "/proc", "--dev", "/dev"]


def bwrap_command(
    bwrap: str,
    python: str,
    isolate_dir: Path,
    slot_dir: Path,
    control_fd: int,
    *,
    inner_dir: str = "/sandbox",
    extra_ro_binds: tuple[str, ...] = (),
) -> list[str]:
    """Starts the zygote inside fresh bubblewrap namespaces, seeing ``slot_dir`` as
    ``inner_dir``; ``extra_ro_binds`` are more host paths to show read-only."""
    caps = ("CAP_SETUID", "CAP_SETGID", "CAP_KILL")
    return [
        *bwrap_namespaces(bwrap, python, caps, extra_ro_binds),
        "--bind", str(slot_dir), inner_dir,
        "--bind", str(slot_dir / "tmp"), "/tmp",
        "--bind", str(slot_dir / "shm"), "/dev/shm",
        "--ro-bind", str(isolate_dir), f"{ISOLATE_PARENT}/isolate",
        "--chdir", inner_dir,
        python, *bootstrap(ISOLATE_PARENT), "--control-fd", str(control_fd),
    ]  # fmt: skip


def _outside_usr(python: str) -> list[str]:
    """The installation prefix of an interpreter that does not live under /usr."""
    real = os.path.realpath(python)
    if real.startswith("/usr/"):
        return []
    return [str(Path(real).parent.parent)]
