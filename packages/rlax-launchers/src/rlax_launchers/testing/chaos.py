"""Faults injected into a locally launched run, and what each one cost.

:class:`ChaosMonkey` watches a run started with ``rlax launch`` (launcher: local) through
its run directory and, while the trainer makes progress, does what machines do to a
job: it SIGKILLs a worker every ``worker_kill_every_s`` seconds (round robin), preempts
one worker gracefully with ``rlax preempt``, SIGKILLs the trainer once and the transport
server once, and, where the run has verifiers, SIGKILLs one and preempts another. A
one-off fault waits until the run has recovered from the previous one (a new step was
logged), so the time each fault cost can be told apart. It does not wait for a preempted
process to leave: that takes seconds (the interpreter's exit), in which a fast run may
pass all its remaining steps.

:func:`chaos_report` reads the run's metrics, launcher events and last checkpoint and
gives the accounting (steps, groups trained, duplicates, staleness) and, per kind of
fault, the time lost: the gap from the last step before the fault to the first step
after it that goes beyond it, minus the run's median step interval.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rlax_core.kit.launcher import (
    METRICS_FILE,
    TABLE_FILE,
    pid_alive,
    read_events,
    read_metrics,
    read_table,
)


@dataclass
class Fault:
    """One injected fault: what, to whom, when, and where the run stood."""

    kind: str  # "worker_kill", "preempt", "trainer_kill", "transport_kill",
    # "verifier_kill", "verifier_preempt"
    name: str
    time: float
    step: int  # the last step logged before it
    step_time: float  # when that step was logged


@dataclass
class ChaosPlan:
    """When to inject what (steps are the trainer's logged steps)."""

    worker_kill_every_s: float = 15.0
    # One worker kill is tied to a step, like the other one-off faults: a run whose
    # steps are fast can pass its quiet step before the first timed kill is due.
    worker_kill_at_step: int = 8
    preempt_at_step: int = 5
    trainer_kill_at_step: int = 12
    transport_kill_at_step: int = 24
    # Verifier faults, where the run has verifiers (none is injected otherwise).
    verifier_kill_at_step: int = 16
    verifier_preempt_at_step: int = 20
    quiet_from_step: int = 34  # no new faults from here on: the run ends undisturbed
    preempt_grace_s: float = 10.0


class ChaosMonkey(threading.Thread):
    """Injects the faults of a :class:`ChaosPlan` into the run in ``run_dir``."""

    def __init__(self, run_dir: Path, plan: ChaosPlan) -> None:
        super().__init__(name="chaos-monkey", daemon=True)
        self.run_dir = run_dir
        self.plan = plan
        self.faults: list[Fault] = []
        self.errors: list[BaseException] = []
        self.status_output = ""  # `rlax status` once, during the run
        self._halt = threading.Event()
        # `rlax preempt` waits until its process leaves: it runs beside the monkey, which
        # keeps to its plan meanwhile (a blocked monkey would miss the later faults).
        self._preempting: dict[str, subprocess.Popen] = {}

    def stop(self) -> None:
        """Stops injecting; joins the thread."""
        self._halt.set()
        self.join(timeout=60)
        for preempting in self._preempting.values():
            _, stderr = preempting.communicate(timeout=120)
            if preempting.returncode != 0:
                self.errors.append(RuntimeError(f"rlax preempt failed: {stderr}"))

    def run(self) -> None:
        try:
            self._inject()
        except BaseException as exc:
            self.errors.append(exc)

    def _inject(self) -> None:
        one_offs: list[tuple[int, str]] | None = None
        next_worker_kill: float | None = None
        workers = 0
        recovering_from: int | None = None  # the step of the last one-off fault
        while not self._halt.wait(0.2):
            last = _last_step(self.run_dir)
            if last is None or last[0] < 1:
                continue  # not training yet
            if one_offs is None:  # the launcher's table lists every process by now
                one_offs = self._one_offs()
            step, step_time = last
            if step >= self.plan.quiet_from_step and not one_offs:
                self.status_output = _rlax("status", str(self.run_dir)).stdout
                return
            if recovering_from is not None and step <= recovering_from:
                continue
            recovering_from = None
            if next_worker_kill is None:
                next_worker_kill = time.monotonic() + self.plan.worker_kill_every_s
            if one_offs and step >= one_offs[0][0]:
                _, kind = one_offs.pop(0)
                self._one_off(kind, step, step_time)
                recovering_from = step
            elif step < self.plan.quiet_from_step and time.monotonic() >= next_worker_kill:
                name = f"w{workers % _count(self.run_dir, 'worker')}"
                workers += 1
                # A kill of a process still leaving after its preempt would count as neither.
                if not self._leaving(name) and self._kill(name):
                    self.faults.append(Fault("worker_kill", name, time.time(), step, step_time))
                next_worker_kill = time.monotonic() + self.plan.worker_kill_every_s

    def _one_offs(self) -> list[tuple[int, str]]:
        """(step, kind) of every one-off fault, in step order."""
        plan = self.plan
        one_offs = [
            (plan.preempt_at_step, "preempt"),
            (plan.worker_kill_at_step, "worker_kill"),
            (plan.trainer_kill_at_step, "trainer_kill"),
            (plan.transport_kill_at_step, "transport_kill"),
        ]
        if _count(self.run_dir, "verifier") >= 2:
            one_offs += [
                (plan.verifier_kill_at_step, "verifier_kill"),
                (plan.verifier_preempt_at_step, "verifier_preempt"),
            ]
        return sorted(one_offs)

    def _one_off(self, kind: str, step: int, step_time: float) -> None:
        now = time.time()
        if kind in ("preempt", "verifier_preempt"):
            name = "w1" if kind == "preempt" else "v1"
            self._preempting[name] = subprocess.Popen(
                [sys.executable, "-m", "rlax_core.cli", "preempt", str(self.run_dir), name,
                 "--grace", str(self.plan.preempt_grace_s)],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            )  # fmt: skip
        elif kind == "worker_kill":
            name = next(
                (n for n in ("w0", "w1", "w2") if not self._leaving(n) and self._kill(n)), ""
            )
            if not name:
                raise RuntimeError("no worker was running (and not leaving) when its kill was due")
        else:
            name = {"trainer_kill": "trainer", "transport_kill": "transport"}.get(kind, "v0")
            if not self._kill(name):
                raise RuntimeError(f"{name} was not running when its fault was due")
        self.faults.append(Fault(kind, name, now, step, step_time))

    def _leaving(self, name: str) -> bool:
        """Whether ``rlax preempt`` of ``name`` is still waiting for it to leave."""
        preempting = self._preempting.get(name)
        return preempting is not None and preempting.poll() is None

    def _kill(self, name: str) -> bool:
        entry = read_table(self.run_dir).entry(name)
        if entry is None or entry.state != "running" or not pid_alive(entry.pid):
            return False
        os.killpg(entry.pgid, signal.SIGKILL)
        return True


def chaos_report(run_dir: Path, faults: list[Fault]) -> dict[str, Any]:
    """The run's accounting and the time lost to each kind of fault (JSON-ready)."""
    rows = read_metrics(run_dir)
    times = {r["step"]: r["time"] for r in rows}
    # From step 2 on: step 1 waits for the first compilations.
    intervals = [times[s] - times[s - 1] for s in sorted(times) if s >= 2 and s - 1 in times]
    median = statistics.median(intervals) if intervals else 0.0
    per_fault = []
    counted: set[int] = set()
    for fault in faults:
        after = [times[s] for s in sorted(times) if s > fault.step]
        if not after:
            continue
        gap = after[0] - fault.step_time
        # Two faults in one step interval share its gap: it is counted for the first.
        lost = None if fault.step in counted else gap - median
        counted.add(fault.step)
        per_fault.append({**asdict(fault), "gap_s": gap, "lost_s": lost})
    kinds: dict[str, dict[str, Any]] = {}
    for item in per_fault:
        summary = kinds.setdefault(item["kind"], {"count": 0, "lost_s": []})
        summary["count"] += 1
        if item["lost_s"] is not None:
            summary["lost_s"].append(round(item["lost_s"], 2))
    for summary in kinds.values():
        summary["total_lost_s"] = round(sum(summary["lost_s"]), 2)
        summary["mean_lost_s"] = round(summary["total_lost_s"] / max(len(summary["lost_s"]), 1), 2)
    last = rows[-1]
    trained_ids = _trained_ids(run_dir, last["step"])
    table = read_table(run_dir) if (run_dir / TABLE_FILE).exists() else None
    return {
        "steps": [r["step"] for r in rows],
        "wall_s": rows[-1]["time"] - rows[min(1, len(rows) - 1)]["time"],  # step 1 to the end
        "median_step_interval_s": median,
        "groups": {
            k: last.get(f"groups/{k}")
            for k in ("issued", "trained", "duplicates", "dropped_no_signal", "dropped_unjudged")
        },
        "trained_ids": len(trained_ids),
        "trained_ids_unique": len(set(trained_ids)),
        "staleness_dropped": last.get("staleness/dropped"),
        "staleness_max": max(r.get("staleness/max", 0) or 0 for r in rows[1:]),
        "pass@1": {"first": rows[0].get("eval/pass@1"), "final": last.get("eval/pass@1")},
        "reward_mean_last5": statistics.mean(r.get("reward/mean", 0) for r in rows[-5:]),
        "processes": [
            p.model_dump(include={"name", "restarts", "crashes", "preemptions"})
            for p in table.processes
        ]
        if table
        else [],
        "launcher_events": len(read_events(run_dir)),
        "faults": per_fault,
        "lost_by_kind": kinds,
    }


def launch(config: Path, run_dir: Path) -> subprocess.Popen:
    """``rlax launch CONFIG --run-dir RUN_DIR`` as a child process (output to a file)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    log = (run_dir.parent / f"{run_dir.name}-launch.log").open("wb")
    return subprocess.Popen(
        [sys.executable, "-m", "rlax_core.cli", "launch", str(config), "--run-dir", str(run_dir)],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )


def _rlax(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rlax_core.cli", *args], capture_output=True, text=True, timeout=120
    )


def _last_step(run_dir: Path) -> tuple[int, float] | None:
    if not (run_dir / METRICS_FILE).exists():
        return None
    rows = read_metrics(run_dir)
    return (rows[-1]["step"], rows[-1]["time"]) if rows else None


def _count(run_dir: Path, role: str) -> int:
    """Processes of ``role`` in the run's table (0 before the launcher wrote it)."""
    if not (run_dir / TABLE_FILE).exists():
        return 0
    return sum(1 for p in read_table(run_dir).processes if p.role == role)


def _trained_ids(run_dir: Path, step: int) -> list[str]:
    meta = run_dir / "checkpoints" / str(step) / "meta" / "metadata"  # Orbax's JSON item
    return json.loads(meta.read_text())["controller"]["trained_ids"] if meta.exists() else []


@dataclass
class ChaosResult:
    """What a launched run produced: its exit status, the faults injected and the report."""

    returncode: int
    faults: list[Fault] = field(default_factory=list)
    status_output: str = ""
    errors: list[BaseException] = field(default_factory=list)
    report: dict[str, Any] = field(default_factory=dict)


def run_chaos(
    config: Path, run_dir: Path, plan: ChaosPlan | None, *, timeout_s: float
) -> ChaosResult:
    """Launches the run, injects ``plan``'s faults (none if None) and reports.

    The launch is stopped (SIGTERM, then SIGKILL) if it runs past ``timeout_s``;
    its return code is then not 0.
    """
    process = launch(config, run_dir)
    monkey = ChaosMonkey(run_dir, plan) if plan is not None else None
    if monkey is not None:
        monkey.start()
    try:
        code = process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            code = process.wait()
    finally:
        if monkey is not None:
            monkey.stop()
    result = ChaosResult(code)
    if monkey is not None:
        result.faults, result.errors = monkey.faults, monkey.errors
        result.status_output = monkey.status_output
    if code == 0:
        result.report = chaos_report(run_dir, result.faults)
    return result


def launch_log(run_dir: Path) -> str:
    """The tail of ``rlax launch``'s own output."""
    path = run_dir.parent / f"{run_dir.name}-launch.log"
    return path.read_text(errors="replace")[-3000:] if path.exists() else ""
