"""The local launcher's supervision, with small real processes standing in for the roles.

Each role is a real child process (a few lines of Python) that exits, crashes, ignores
SIGTERM or leaves a grandchild behind exactly when a test needs it to; the supervisor,
`rlax status` and `rlax preempt` act on them with real signals and process groups.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

import pytest

from rlax_core.cli.main import main
from rlax_core.cli.preempt_cmd import preempt
from rlax_core.errors import RlaxError
from rlax_core.kit.launcher import collect_status, pid_alive, read_events, read_table
from rlax_launchers.local.config import LocalLauncherConfig
from rlax_launchers.local.supervised import SupervisedProcess
from rlax_launchers.local.supervisor import Supervisor

SERVER = "import time; print('serving fake at nowhere', flush=True); time.sleep(600)"
FOREVER = "import time; time.sleep(600)"
# Exits 1 the first time it runs, 0 (after a second) the next: a trainer that crashed once.
CRASH_ONCE = (
    "import pathlib, sys, time; p = pathlib.Path(sys.argv[1]); first = not p.exists(); "
    "p.write_text('x'); time.sleep(0 if first else 1); sys.exit(1 if first else 0)"
)
# Leaves a grandchild in its process group, then waits: stopping the group must end both.
WITH_CHILD = (
    "import subprocess, sys, time, pathlib; "
    "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
    "pathlib.Path(sys.argv[1]).write_text(str(c.pid)); time.sleep(600)"
)
# Says when it ignores SIGTERM (a busy machine may take seconds to start Python).
IGNORES_SIGTERM = (
    "import pathlib, signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "pathlib.Path(sys.argv[1]).write_text('ready'); time.sleep(600)"
)
WAIT_FOR_FILE = (
    "import pathlib, sys, time\nwhile not pathlib.Path(sys.argv[1]).exists(): time.sleep(0.05)"
)

pytestmark = pytest.mark.distributed


def _process(name: str, role: str, code: str, run_dir: Path, *args: object) -> SupervisedProcess:
    return SupervisedProcess(name, role, [sys.executable, "-c", code, *map(str, args)], run_dir)


def _supervisor(run_dir: Path, processes: list[SupervisedProcess], **settings) -> Supervisor:
    config = LocalLauncherConfig(restart_backoff_s=0.05, stop_grace_s=2.0, **settings)
    return Supervisor(processes, run_dir, config, {**os.environ, "PYTHONUNBUFFERED": "1"})


def _wait(predicate, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail("the condition did not come true in time")
        time.sleep(0.05)


def _running(run_dir: Path, name: str, restarts: int = 0) -> bool:
    if not (run_dir / "launcher.json").exists():
        return False
    entry = read_table(run_dir).entry(name)
    return entry.state == "running" and entry.restarts == restarts and pid_alive(entry.pid)


def test_a_crashed_trainer_is_restarted_and_its_exit_0_ends_the_run(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    grandchild_file = tmp_path / "grandchild.pid"
    processes = [
        _process("transport", "transport", SERVER, run_dir),
        _process("trainer", "trainer", CRASH_ONCE, run_dir, tmp_path / "ran-once"),
        _process("w0", "worker", WITH_CHILD, run_dir, grandchild_file),
    ]
    assert _supervisor(run_dir, processes).run(threading.Event()) is True
    table = read_table(run_dir)
    trainer = table.entry("trainer")
    assert (trainer.restarts, trainer.crashes, trainer.last_exit_code) == (1, 1, 0)
    assert all(p.state == "stopped" for p in table.processes)
    assert [(e["event"], e["name"]) for e in read_events(run_dir)][:4] == [
        ("start", "transport"), ("start", "trainer"), ("start", "w0"), ("exit", "trainer"),
    ]  # fmt: skip
    assert not pid_alive(int(grandchild_file.read_text()))  # the worker's group was stopped
    log = (run_dir / "logs" / "trainer.log").read_text()
    assert log.count("rlax launch: start") == 2  # one log, appended across restarts


def test_exit_status_2_is_a_bad_config_and_fails_the_launch(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    bad = "import sys; print('error: model.preset is not a preset'); sys.exit(2)"
    processes = [
        _process("trainer", "trainer", bad, run_dir),
        _process("w0", "worker", FOREVER, run_dir),
    ]
    with pytest.raises(RlaxError, match=r"(?s)status 2 .*model.preset is not a preset"):
        _supervisor(run_dir, processes).run(threading.Event())
    assert read_table(run_dir).entry("w0").state == "stopped"


def test_a_crash_loop_gives_up(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    processes = [
        _process("trainer", "trainer", FOREVER, run_dir),
        _process("w0", "worker", "import sys; sys.exit(1)", run_dir),
    ]
    with pytest.raises(RlaxError, match="w0 died 3 times in a row"):
        _supervisor(run_dir, processes, max_failures=3).run(threading.Event())
    assert read_table(run_dir).entry("w0").crashes == 3


def test_preempt_reclaims_a_worker_and_the_launcher_restarts_it(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    done = tmp_path / "done"
    processes = [
        _process("trainer", "trainer", WAIT_FOR_FILE, run_dir, done),
        _process("w0", "worker", FOREVER, run_dir),  # SIGTERM ends it at once
        _process("w1", "worker", IGNORES_SIGTERM, run_dir, tmp_path / "ready"),  # SIGKILL
        _process("v0", "verifier", FOREVER, run_dir),  # verifiers are preemptible too
    ]
    supervisor = _supervisor(run_dir, processes)
    result: list[bool] = []
    thread = threading.Thread(target=lambda: result.append(supervisor.run(threading.Event())))
    thread.start()
    try:
        _wait(lambda: _running(run_dir, "w0") and (tmp_path / "ready").exists())
        assert preempt(run_dir, "w0", grace_s=10) == "exited within the grace period"
        assert preempt(run_dir, "w1", grace_s=0.5) == "killed after the 0.5 s grace period"
        assert preempt(run_dir, "v0", grace_s=10) == "exited within the grace period"
        _wait(lambda: _running(run_dir, "w0", restarts=1) and _running(run_dir, "w1", 1)
              and _running(run_dir, "v0", restarts=1))  # fmt: skip
        rows = {row.name: row for row in collect_status(run_dir)[0]}
        assert (rows["w0"].preemptions, rows["w0"].crashes, rows["w0"].alive) == (1, 0, True)
        assert (rows["w1"].preemptions, rows["w1"].crashes) == (1, 0)
        assert (rows["v0"].role, rows["v0"].preemptions, rows["v0"].crashes) == ("verifier", 1, 0)
    finally:
        done.write_text("")
        thread.join(60)
    assert result == [True]


def test_status_and_preempt_name_what_is_wrong(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["status", str(tmp_path / "nowhere")]) == 2
    assert "no run directory" in capsys.readouterr().err
    assert main(["status", str(tmp_path)]) == 2
    assert "no launcher.json and no status/*.json" in capsys.readouterr().err
    run_dir = tmp_path / "run"
    processes = [_process("trainer", "trainer", "pass", run_dir)]
    assert _supervisor(run_dir, processes).run(threading.Event())
    assert main(["preempt", str(run_dir), "w7"]) == 2
    assert "'w7' is not a process of this run in" in capsys.readouterr().err
    assert main(["preempt", str(run_dir), "trainer"]) == 2
    assert "'trainer' is the trainer, not a worker or verifier" in capsys.readouterr().err
    (run_dir / "status").mkdir()
    (run_dir / "status" / "trainer.json").write_text(json.dumps(
        {"name": "trainer", "pid": 1, "updated_at": time.time(), "role": "trainer", "step": 3,
         "policy_version": 4, "throughput": {"samples_per_s": 12.5}}
    ))  # fmt: skip
    assert main(["status", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "trainer" in out and "12.5 samples/s" in out and "stopped" in out
