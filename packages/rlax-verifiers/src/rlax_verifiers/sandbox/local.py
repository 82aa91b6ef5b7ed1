"""The ``local`` sandbox: a warm pool of zygotes in bubblewrap namespaces on this machine.

Each slot is a zygote in its own network, pid, ipc, uts and mount namespaces, with a
read-only view of the system directories and its own size-capped tmpfs for work
directories, ``/tmp`` and ``/dev/shm``. A run is a fresh fork of the slot's zygote that
becomes the slot's unprivileged uid, lowers its rlimits and runs the program in an empty
environment; the zygote kills its process group at the wall limit and every process of
the uid afterwards. Throughput is not bound by interpreter start-up: a Python run costs
a fork of an interpreter that is already warm. Needs root (to switch uids and mount) and
bubblewrap (Debian: ``apt-get install bubblewrap``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from rlax_core.contracts.verifier import RunRequest, SandboxBackend
from rlax_core.plugins.registry import BuildContext
from rlax_core.types.verdict import ExecutionResult
from rlax_verifiers.sandbox import SandboxUnavailableError
from rlax_verifiers.sandbox.isolate import batch
from rlax_verifiers.sandbox.isolate.container import random_uid_block
from rlax_verifiers.sandbox.isolate.launch import bwrap_command
from rlax_verifiers.sandbox.isolate.pool import Pool
from rlax_verifiers.sandbox.isolate.slot import Slot, SlotBrokenError
from rlax_verifiers.sandbox.records import request_to_dict, results_from_dicts, sandbox_errors

ISOLATE_DIR = Path(batch.__file__).resolve().parent


def _default_python() -> str:
    return "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


class LocalSandboxConfig(BaseModel):
    """Local sandbox: bubblewrap namespaces, a uid per slot, rlimits, a warm zygote pool."""

    model_config = ConfigDict(extra="forbid")

    workers: int = Field(
        default_factory=lambda: os.cpu_count() or 1,
        ge=1,
        description="Slots: programs run at the same time (default: one per CPU).",
    )
    python: str = Field(
        default_factory=_default_python,
        description="Interpreter that runs Python programs (default: /usr/bin/python3).",
    )
    bwrap: str = Field(default="bwrap", description="The bubblewrap executable.")
    first_uid: int | None = Field(
        default=None,
        ge=1000,
        description="Slot i runs programs as uid first_uid + i (default: a random block).",
    )
    slot_disk_mb: int = Field(
        default=256, ge=16, description="Size of each slot's tmpfs (work dir, /tmp, /dev/shm)."
    )
    processes: int = Field(default=32, ge=1, description="Most processes (and threads) per run.")
    open_files: int = Field(default=64, ge=8, description="Most open files per process.")
    file_size_mb: int = Field(default=16, ge=1, description="Largest file a run may write.")
    compile_time_limit_s: float = Field(
        default=15.0, gt=0, description="Wall-clock limit of one C++ compilation."
    )
    cxx: str = Field(default="/usr/bin/g++", description="The C++ compiler.")
    extra_ro_binds: tuple[str, ...] = Field(
        default=(), description="More host paths the programs may read (e.g. a venv)."
    )


class LocalSandbox(SandboxBackend):
    """Runs programs in the local zygote pool; starts it on first use."""

    def __init__(self, config: LocalSandboxConfig | None = None) -> None:
        self.config = config or LocalSandboxConfig()
        self.first_uid = self.config.first_uid or random_uid_block()
        self._pool: Pool | None = None
        self._root: Path | None = None
        self._mounts: list[Path] = []
        self._lock = threading.Lock()

    def run_batch(self, requests: Sequence[RunRequest]) -> list[list[ExecutionResult]]:
        """Runs every request's inputs over the pool's slots."""
        try:
            pool = self._started()
        except SlotBrokenError as exc:
            return sandbox_errors(requests, f"local sandbox failed to start: {exc}")
        rows = batch.run_batch(pool, [request_to_dict(r) for r in requests], self._settings())
        return results_from_dicts(rows)

    def close(self) -> None:
        """Stops the zygotes, unmounts the slots' tmpfs and removes their directories."""
        with self._lock:
            if self._pool is not None:
                self._pool.close()
                self._pool = None
            for mount in self._mounts:
                subprocess.run(["umount", "-l", str(mount)], capture_output=True, check=False)
            self._mounts.clear()
            if self._root is not None:
                shutil.rmtree(self._root, ignore_errors=True)
                self._root = None

    def _settings(self) -> dict[str, object]:
        c = self.config
        return {
            "processes": c.processes,
            "open_files": c.open_files,
            "file_size_mb": c.file_size_mb,
            "compile_time_limit_s": c.compile_time_limit_s,
            "cxx": c.cxx,
        }

    def _started(self) -> Pool:
        with self._lock:
            if self._pool is None:
                self._check_host()
                self._pool = self._start_pool()
            return self._pool

    def _check_host(self) -> None:
        if os.geteuid() != 0:
            raise SandboxUnavailableError(
                "the local sandbox runs programs as separate unprivileged uids and needs root "
                "for that; run as root (e.g. in a container or CI machine), or use the docker "
                "sandbox"
            )
        if shutil.which(self.config.bwrap) is None:
            raise SandboxUnavailableError(
                f"the local sandbox needs bubblewrap ({self.config.bwrap!r} is not on PATH); "
                "install it (Debian/Ubuntu: apt-get install bubblewrap)"
            )
        if not os.access(self.config.python, os.X_OK):
            raise SandboxUnavailableError(
                f"the local sandbox's interpreter {self.config.python!r} does not exist; set "
                "python: in its config"
            )

    def _start_pool(self) -> Pool:
        c = self.config
        bwrap = shutil.which(c.bwrap) or c.bwrap
        self._root = Path(tempfile.mkdtemp(prefix="rlax-local-"))
        os.chmod(self._root, 0o711)
        slots = []
        for i in range(c.workers):
            slot_dir = self._root / f"slot-{i}"
            slot_dir.mkdir(mode=0o711)
            self._mount_tmpfs(slot_dir, c.slot_disk_mb)

            def command(index: int, fd: int, host_dir: Path) -> list[str]:
                return bwrap_command(
                    bwrap, c.python, ISOLATE_DIR, host_dir, fd, extra_ro_binds=c.extra_ro_binds
                )

            slots.append(Slot(i, command, slot_dir, "/sandbox", self.first_uid + i))
        pool = Pool(slots)
        try:
            pool.start()
        except BaseException:
            pool.close()
            raise
        return pool

    def _mount_tmpfs(self, path: Path, size_mb: int) -> None:
        result = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m,mode=0711,nosuid,nodev", "tmpfs",
             str(path)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if result.returncode != 0:
            raise SandboxUnavailableError(
                f"could not mount a tmpfs for a sandbox slot at {path}: {result.stderr.strip()}"
            )
        self._mounts.append(path)


def make_local_sandbox(config: LocalSandboxConfig, context: BuildContext) -> LocalSandbox:
    """Builds the local sandbox (its pool starts on first use)."""
    return LocalSandbox(config)
