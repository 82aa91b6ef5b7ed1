"""`rlax launch` with launcher: {type: local}: what it would start, and what it refuses."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from rlax_core.cli.main import main

GRPC = {"type": "grpc", "address": "127.0.0.1:50999"}


def test_dry_run_prints_the_command_of_every_process(
    write_run_config: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_run_config({"type": "local", "workers": 3}, transport=GRPC, run_dir=None)
    run_dir = tmp_path / "run"
    assert main(["launch", str(config), "--dry-run", "--run-dir", str(run_dir)]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("rlax")]
    assert lines[0] == (
        f"rlax serve param-server --config {config.resolve()} "
        f"--set server.state_dir={run_dir}/transport --run-dir {run_dir} &"
    )  # the server keeps its state in the run directory (it survives a restart), and
    # reports its load there
    assert [line.split("--worker-id ")[1] for line in lines[1:4]] == ["w0 &", "w1 &", "w2 &"]
    assert lines[-1] == (
        f"rlax train {config.resolve()} --run-dir {run_dir} --role trainer --no-progress"
    )
    assert not run_dir.exists()  # a dry run starts nothing


def test_verifier_processes_come_with_the_verifier_stage(
    write_run_config: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    staged = {"placement": "stage", "workers": 2}
    config = write_run_config({"type": "local", "workers": 1}, transport=GRPC, run_dir=None,
                              verifier=staged)  # fmt: skip
    run_dir = tmp_path / "run"
    assert main(["launch", str(config), "--dry-run", "--run-dir", str(run_dir)]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("rlax")]
    verifiers = [line for line in lines if "--role verifier" in line]
    assert [line.split("--verifier-id ")[1] for line in verifiers] == ["v0 &", "v1 &"]
    # Asked for verifiers while the workers judge inline: refused, with the fix named.
    inline = write_run_config({"type": "local", "verifiers": 2}, transport=GRPC, run_dir=None,
                              name="inline")  # fmt: skip
    assert main(["launch", str(inline), "--dry-run", "--run-dir", str(run_dir)]) == 2
    assert "set verifier.placement: stage" in capsys.readouterr().err


def test_the_inproc_transport_cannot_be_launched_as_processes(
    write_run_config: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_run_config({"type": "local"}, transport={"type": "inproc"}, run_dir=None)
    assert main(["launch", str(config)]) == 2
    err = capsys.readouterr().err
    assert "transport.type inproc only works inside one process" in err
    assert "rlax train CONFIG" in err
