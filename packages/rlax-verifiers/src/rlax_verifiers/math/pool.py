"""Worker processes that judge untrusted answers under a deadline and a memory limit.

Parsing a completion's answer is parsing untrusted text with SymPy: ``9^{9^{9^{9}}}``,
``100000!`` or a 100,000-digit number can take minutes or all memory, and nothing inside
a Python thread can stop that. So each answer is judged in a worker process, under an
address-space limit (``RLIMIT_AS``), with a deadline the parent enforces: a worker that
overruns is killed and replaced and the answer gets WA. A worker that dies otherwise
(a crash, a kill from outside) has its answer retried on a fresh worker, then SE.

Workers come from multiprocessing's forkserver (spawn where there is none), never a plain
fork: JAX may be loaded in the parent, and forking a process with its threads is unsafe.
The forkserver preloads the equivalence module, so a replacement worker is a fork of a
process that has SymPy imported already (milliseconds, not the three-second import).
One thread per worker feeds it from a shared queue: a batch is judged in parallel, any
number of threads may submit, and a slow answer holds up only its own worker.
"""

from __future__ import annotations

import atexit
import logging
import multiprocessing
import queue
import resource
import signal
import threading
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from rlax_verifiers.math.options import MatchOptions

log = logging.getLogger(__name__)

EQUIVALENCE = "rlax_verifiers.math.equivalence"
READY = "ready"
# A worker is replaced after this many answers, so caches and heap growth stay bounded.
TASKS_PER_WORKER = 1000
_preloaded = False
_preload_lock = threading.Lock()
_start_lock = threading.Lock()
# Pools still open at exit are closed before multiprocessing's own exit handler kills
# their workers, which the feeding threads would otherwise take for crashes to retry.
_open_pools: weakref.WeakSet[WorkerPool] = weakref.WeakSet()


@atexit.register
def _close_open_pools() -> None:
    for pool in list(_open_pools):
        pool.close()


@dataclass(frozen=True)
class Task:
    """One answer to judge: the gold, the (already capped) completion, the options."""

    gold: str
    completion: str
    options: MatchOptions


@dataclass(frozen=True)
class Outcome:
    """A worker's decision: ``status`` is ``"AC"``, ``"WA"`` or ``"SE"``."""

    status: str
    message: str = ""


def _context() -> Any:
    """The forkserver context with the equivalence module preloaded (spawn without one)."""
    global _preloaded
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    with _preload_lock:
        if not _preloaded:
            # "__main__" stays first, as by default: each child would otherwise re-import
            # the main script itself. Has no effect if the forkserver already runs.
            context.set_forkserver_preload(["__main__", EQUIVALENCE])
            _preloaded = True
    return context


def _address_space() -> int | None:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _limit_memory(memory_mb: int) -> None:
    """Caps the address space at what the worker uses now plus ``memory_mb``."""
    start = _address_space()
    if start is None:
        return  # no /proc: the deadline still bounds the work
    limit = start + memory_mb * 1024 * 1024
    try:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (ValueError, OSError):
        log.warning("could not limit the math judge worker's memory")


def serve(conn: Connection, memory_mb: int) -> None:
    """A worker's main loop: receive a :class:`Task`, reply ``(status, message, recycle)``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when workers stop
    from rlax_verifiers.math.equivalence import judge_text
    from rlax_verifiers.math.options import MatchOptions

    _limit_memory(memory_mb)
    # The first comparison builds the parsers' lazy state (a hundred times the cost of
    # the next one, and more on a loaded machine): done here, before the worker says it
    # is ready, it never counts against an answer's deadline.
    judge_text("1/2", "\\boxed{\\frac{2}{4}}", MatchOptions())
    conn.send(READY)
    while True:
        try:
            task: Task = conn.recv()
        except (EOFError, OSError):
            return
        recycle = False
        try:
            correct, detail = judge_text(task.gold, task.completion, task.options)
            reply = ("AC" if correct else "WA", detail, False)
        except MemoryError:
            recycle = True  # a heap that ran out may be left fragmented
            reply = ("WA", f"comparing the answer needed over {memory_mb} MB", recycle)
        except RecursionError:
            reply = ("WA", "the answer is nested too deeply to compare", False)
        except Exception as exc:  # an answer no parser expected is still just wrong
            reply = ("WA", f"the answer could not be compared ({type(exc).__name__})", False)
        conn.send(reply)


class _Worker:
    """One worker process and the parent's end of its pipe."""

    def __init__(
        self, context: Any, target: Callable[..., None], memory_mb: int, start_timeout_s: float
    ) -> None:
        self.conn, child = context.Pipe()
        self.process = context.Process(
            target=target, args=(child, memory_mb), name="rlax-math-judge", daemon=True
        )
        self.tasks = 0
        try:
            with _start_lock:  # multiprocessing's bookkeeping of children is not built for threads
                self.process.start()
        finally:
            child.close()
        if not self.conn.poll(start_timeout_s):
            self.stop()
            raise RuntimeError(f"a math judge worker did not start within {start_timeout_s} s")
        try:
            if self.conn.recv() != READY:
                raise RuntimeError("a math judge worker sent an unexpected greeting")
        except EOFError:
            death = self.death()
            self.stop()
            raise RuntimeError(f"a math judge worker died while starting: {death}") from None

    def death(self) -> str:
        """How the process ended, once it has."""
        self.process.join(timeout=2.0)
        code = self.process.exitcode
        if code is None:
            return "its pipe closed"
        if code < 0:
            return f"killed by {signal.Signals(-code).name}"
        return f"exited with status {code}"

    def stop(self) -> None:
        """Kills the process and closes the pipe."""
        if self.process.is_alive():
            self.process.kill()
        self.process.join(timeout=5.0)
        self.conn.close()


class WorkerPool:
    """``workers`` processes judging :class:`Task` values; see the module docstring.

    Args:
        workers: number of worker processes (and feeding threads).
        timeout_s: wall time one answer may take in a worker before it is killed (WA).
        memory_mb: memory a worker may allocate beyond its start-up size.
        retries: times an answer is retried on a fresh worker after its worker died for
            another reason than the deadline, before it gets SE.
        start_timeout_s: how long a worker may take to start.
        target: the workers' main function (an importable module-level function).
    """

    def __init__(
        self,
        workers: int,
        timeout_s: float,
        memory_mb: int,
        retries: int,
        start_timeout_s: float = 120.0,
        target: Callable[[Connection, int], None] = serve,
    ) -> None:
        self._workers = workers
        self._timeout_s = timeout_s
        self._memory_mb = memory_mb
        self._retries = retries
        self._start_timeout_s = start_timeout_s
        self._target = target
        self._jobs: queue.SimpleQueue[tuple[Task, Future[Outcome]] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._closed = False

    def run(self, tasks: Sequence[Task]) -> list[Outcome]:
        """Judges every task, in parallel across the workers; outcomes in task order."""
        futures: list[Future[Outcome]] = []
        with self._lock:  # jobs are queued before close()'s stop markers, or not at all
            if self._closed:
                return [Outcome("SE", "the math judge was closed")] * len(tasks)
            if not self._threads:
                self._threads = [
                    threading.Thread(target=self._feed, name=f"rlax-math-judge-{i}", daemon=True)
                    for i in range(self._workers)
                ]
                for thread in self._threads:
                    thread.start()
                _open_pools.add(self)
            for task in tasks:
                future: Future[Outcome] = Future()
                self._jobs.put((task, future))
                futures.append(future)
        return [future.result() for future in futures]

    def close(self) -> None:
        """Finishes the queued tasks, then stops the workers; idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            threads = self._threads
            for _ in threads:
                self._jobs.put(None)
        for thread in threads:
            thread.join()

    def _feed(self) -> None:
        worker: _Worker | None = None
        try:
            while (job := self._jobs.get()) is not None:
                task, future = job
                try:
                    outcome, worker = self._judge(worker, task)
                except Exception as exc:  # a bug here must not leave a caller waiting
                    log.exception("math judge worker thread failed")
                    outcome = Outcome("SE", f"the math judge failed: {exc!r}")
                    if worker is not None:
                        worker.stop()
                    worker = None
                future.set_result(outcome)
        finally:
            if worker is not None:
                worker.stop()

    def _judge(self, worker: _Worker | None, task: Task) -> tuple[Outcome, _Worker | None]:
        """One task on ``worker`` (started if None); returns the worker to use next."""
        death = ""
        for _ in range(self._retries + 1):
            if worker is None:
                try:
                    worker = _Worker(
                        _context(), self._target, self._memory_mb, self._start_timeout_s
                    )
                except (RuntimeError, OSError) as exc:
                    death = str(exc)
                    continue
            try:
                worker.conn.send(task)
                reply = worker.conn.recv() if worker.conn.poll(self._timeout_s) else None
            except (EOFError, OSError):
                death = worker.death()
                worker.stop()
                worker = None
                continue
            if reply is None:
                worker.stop()
                return Outcome(
                    "WA", f"judging the answer took over {self._timeout_s:g} s (pathological)"
                ), None
            status, message, recycle = reply
            worker.tasks += 1
            if recycle or worker.tasks >= TASKS_PER_WORKER:
                worker.stop()
                worker = None
            return Outcome(status, message), worker
        attempts = self._retries + 1
        return Outcome("SE", f"the judge's worker failed {attempts} times: {death}"), None
