"""``rlax launch RUN.yaml --apply --watch``: re-applies until the run has finished.

The run directory is a real bucket (moto's S3 server), read through rlax_core.storage as
the watch reads it; the run's hosts install from ``pip_packages``, so no wheels are built.
The fake gcloud answers each round's listing from ``tpu-vm-list.N.json``.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rlax_core.cli.main import main
from rlax_core.storage import storage_path
from rlax_core.testing.object_stores import ObjectStore, clear_client_caches, start_moto_s3
from rlax_launchers.testing.fake_gcloud import recorded_commands

SECTION = {
    "type": "tpu-vm",
    "project": "rl-project",
    "zone": "us-east5-a",
    "trainer": {"accelerator_type": "v5p-8"},
    "workers": {"accelerator_type": "v5p-8"},
    "pip_packages": ["rlax-core==0.1.0"],
}
NODE = "projects/rl-project/locations/us-east5-a/nodes/{}"


@pytest.fixture(scope="module")
def s3_server() -> Iterator[ObjectStore]:
    store = start_moto_s3()
    yield store
    store.stop()


@pytest.fixture
def bucket(s3_server: ObjectStore, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A fresh run directory in the S3 emulator, with this process's clients pointed at it."""
    for key, value in s3_server.env.items():
        monkeypatch.setenv(key, value)
    clear_client_caches()
    yield s3_server.url("runs", f"demo-{time.monotonic_ns()}")
    monkeypatch.undo()
    clear_client_caches()


def nodes(**states: str) -> str:
    return json.dumps([{"name": NODE.format(n), "state": s} for n, s in states.items()])


def watch_in_background(log: Path, until: Callable[[list[list[str]]], bool], then) -> None:
    """Calls ``then()`` from a thread once the gcloud log satisfies ``until``."""

    def wait() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not until(recorded_commands(log)):
            time.sleep(0.05)
        then()

    threading.Thread(target=wait, daemon=True).start()


def lists(commands: list[list[str]]) -> int:
    return sum(c[3:5] == ["tpu-vm", "list"] for c in commands)


def test_watch_recreates_a_preempted_slice_and_ends_when_the_run_has_finished(
    gcloud: Path,
    bucket: str,
    write_run_config: Callable[..., Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
) -> None:
    answers = tmp_path / "answers"
    (answers / "tpu-vm-list.1.json").write_text(
        nodes(**{"demo-trainer": "READY", "demo-worker-0": "PREEMPTED", "demo-worker-1": "READY"})
    )
    (answers / "tpu-vm-list.json").write_text(
        nodes(**{"demo-trainer": "READY", "demo-worker-0": "READY", "demo-worker-1": "READY"})
    )
    path = write_run_config(SECTION, run_dir=bucket)
    run_dir = storage_path(bucket)

    def finish() -> None:  # as the trainer leaves it: its last step reported, final/ written
        (run_dir / "status").mkdir(parents=True, exist_ok=True)
        (run_dir / "status" / "trainer.json").write_text(json.dumps({"step": 100}))
        (run_dir / "final").mkdir(parents=True, exist_ok=True)
        (run_dir / "final" / "config.json").write_text("{}")

    # A finished earlier run of fewer steps does not end the watch: first step 50 of 100.
    (run_dir / "status").mkdir(parents=True, exist_ok=True)
    (run_dir / "status" / "trainer.json").write_text(json.dumps({"step": 50}))
    (run_dir / "final").mkdir(parents=True, exist_ok=True)
    (run_dir / "final" / "config.json").write_text("{}")
    watch_in_background(gcloud, lambda commands: lists(commands) >= 3, finish)
    argv = ["launch", str(path), "--apply", "--watch", "--watch-interval-s", "0.05"]
    argv += [
        "--skip-checks",
        "--run-dir",
        str(tmp_path / "run"),
        "--set",
        "trainer.total_steps=100",
    ]
    assert main(argv) == 0
    commands = [c[3:6] for c in recorded_commands(gcloud)]
    assert commands[:3] == [
        ["tpu-vm", "list", "--project=rl-project"],
        ["tpu-vm", "delete", "demo-worker-0"],
        ["tpu-vm", "create", "demo-worker-0"],
    ]
    # Later rounds find every slice there: they list and repair nothing.
    assert commands[3:] == [["tpu-vm", "list", "--project=rl-project"]] * (len(commands) - 3)
    assert len(commands) >= 5
    captured = capsys.readouterr()
    assert "watch round 1" in captured.err and "watch round 3" in captured.err
    assert "demo-worker-0 was preempted, suspended or failed; recreating it" in captured.err
    assert f"run demo has finished (step 100, final policy in {bucket})" in captured.out


def test_watch_of_a_finished_run_applies_nothing(
    gcloud: Path,
    bucket: str,
    write_run_config: Callable[..., Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
) -> None:
    run_dir = storage_path(bucket)
    (run_dir / "status").mkdir(parents=True, exist_ok=True)
    (run_dir / "status" / "trainer.json").write_text(json.dumps({"step": 7}))
    (run_dir / "final").mkdir(parents=True, exist_ok=True)
    (run_dir / "final" / "config.json").write_text("{}")
    path = write_run_config(SECTION, run_dir=bucket)
    argv = ["launch", str(path), "--apply", "--watch", "--skip-checks"]
    assert main([*argv, "--run-dir", str(tmp_path / "run"), "--set", "trainer.total_steps=7"]) == 0
    assert recorded_commands(gcloud) == []
    assert "run demo has finished" in capsys.readouterr().out


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_ends_the_watch_at_once_and_leaves_the_run_going(
    gcloud: Path,
    bucket: str,
    write_run_config: Callable[..., Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
    signum: signal.Signals,
) -> None:
    path = write_run_config(SECTION, run_dir=bucket)
    watch_in_background(
        gcloud, lambda commands: len(commands) >= 3, lambda: os.kill(os.getpid(), signum)
    )
    started = time.monotonic()
    argv = ["launch", str(path), "--apply", "--watch", "--watch-interval-s", "600"]
    assert main([*argv, "--skip-checks", "--run-dir", str(tmp_path / "run")]) == 128 + signum
    assert time.monotonic() - started < 60  # not the 600 s of a round
    err = capsys.readouterr().err
    assert f"stopped watching ({signum.name}); run demo goes on" in err
    assert signal.getsignal(signal.SIGTERM) is not None  # the handlers are put back
    assert [c[3:5] for c in recorded_commands(gcloud)] == [
        ["tpu-vm", "list"], ["tpu-vm", "create"], ["tpu-vm", "create"], ["tpu-vm", "create"],
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("extra", "launcher", "message"),
    [
        (["--watch"], SECTION, "--watch keeps re-applying a run: give it with --apply"),
        (
            ["--apply", "--watch", "--watch-interval-s", "0"],
            SECTION,
            "--watch-interval-s must be positive, not 0",
        ),
        (
            ["--apply", "--watch"],
            {"type": "local"},
            "--watch re-applies a cloud launcher; the local launcher supervises",
        ),
    ],
)
def test_watch_refuses_what_it_cannot_do(
    write_run_config: Callable[..., Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
    extra: list[str],
    launcher: dict,
    message: str,
) -> None:
    path = write_run_config(launcher, run_dir=str(tmp_path / "run"))
    assert main(["launch", str(path), *extra, "--skip-checks"]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
