"""The tpu-vm launcher's --apply, --status and --stop, against a gcloud that records its argv.

The fake gcloud (rlax_launchers.testing.fake_gcloud, the ``gcloud`` fixture of
conftest.py) is a separate executable found on PATH, exactly as the real one would be.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rlax_core.cli.main import main
from rlax_core.config import load_run_config
from rlax_core.plugins import Registry
from rlax_launchers.run_credentials import read_credential_files
from rlax_launchers.testing.fake_gcloud import recorded_commands
from rlax_launchers.tpu_vm.plan import build_plan

WHERE = ["--project=rl-project", "--zone=us-east5-a"]
SECTION = {
    "type": "tpu-vm",
    "project": "rl-project",
    "zone": "us-east5-a",
    "trainer": {"accelerator_type": "v5p-16"},
    "workers": {"accelerator_type": "v5p-8"},
}

# --apply builds and uploads the RLAX wheels: stand-ins here (see test_tpu_vm_wheels.py).
pytestmark = pytest.mark.usefixtures("stub_wheels")


def test_apply_runs_the_rendered_commands_in_order_and_writes_the_scripts(
    gcloud: Path,
    write_run_config: Callable[..., Path],
    registry: Registry,
    tmp_path: Path,
    stub_wheels: list[list[Any]],
) -> None:
    path = write_run_config(SECTION)
    run_dir = tmp_path / "run"
    assert main(["launch", str(path), "--apply", "--skip-checks", "--run-dir", str(run_dir)]) == 0
    run_config = load_run_config(path, registry)
    (shipped,) = stub_wheels  # built once, for every script
    assert [w.package.name for w in shipped] == [
        "rlax-core",
        "rlax-transport-nats",
        "rlax-verifiers",
    ]
    credentials = read_credential_files(run_dir / "launch" / "credentials")
    plan = build_plan(run_config.launcher, run_config, run_dir, registry, shipped, credentials)
    listing, *creates = recorded_commands(gcloud)
    assert listing[3:5] == ["tpu-vm", "list"]  # what exists already: nothing
    assert creates == plan.commands
    for script, text in plan.scripts.items():
        assert script.read_text() == text


def test_a_missing_gcloud_is_a_clear_error(
    write_run_config: Callable[..., Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    path = write_run_config(SECTION)
    assert (
        main(["launch", str(path), "--apply", "--skip-checks", "--run-dir", str(tmp_path / "run")])
        == 1
    )
    err = capsys.readouterr().err
    assert "'gcloud' is not on PATH" in err and "--dry-run" in err
    assert "Traceback" not in err


def test_a_failing_command_stops_the_launch_and_says_why(
    gcloud: Path,
    write_run_config: Callable[..., Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    monkeypatch.setenv("FAKE_GCLOUD_FAIL_ON", "demo-worker-0")
    monkeypatch.setenv(
        "FAKE_GCLOUD_FAIL_MESSAGE", "ERROR: (gcloud.compute.tpus.tpu-vm.create) Quota exceeded"
    )
    path = write_run_config(SECTION)
    assert (
        main(["launch", str(path), "--apply", "--skip-checks", "--run-dir", str(tmp_path / "run")])
        == 1
    )
    err = capsys.readouterr().err
    assert "`gcloud compute tpus tpu-vm create demo-worker-0 --project=rl-project" in err
    assert (
        "failed with exit status 1:\nERROR: (gcloud.compute.tpus.tpu-vm.create) Quota exceeded"
        in err
    )
    # The trainer slice was created; the second worker was never tried.
    assert [c[5] for c in recorded_commands(gcloud)[1:]] == ["demo-trainer", "demo-worker-0"]


def test_apply_again_recreates_only_the_preempted_slices(
    gcloud: Path, write_run_config: Callable[..., Path], tmp_path: Path
) -> None:
    node = "projects/rl-project/locations/us-east5-a/nodes/{}"
    (tmp_path / "answers" / "tpu-vm-list.json").write_text(
        json.dumps(
            [
                {"name": node.format("demo-trainer"), "state": "READY"},
                {"name": node.format("demo-worker-0"), "state": "PREEMPTED"},
                {"name": node.format("demo-worker-1"), "state": "READY"},
            ]
        )
    )
    path = write_run_config(SECTION)
    assert (
        main(["launch", str(path), "--apply", "--skip-checks", "--run-dir", str(tmp_path / "run")])
        == 0
    )
    assert [c[3:6] for c in recorded_commands(gcloud)] == [
        ["tpu-vm", "list", "--project=rl-project"],
        ["tpu-vm", "delete", "demo-worker-0"],
        ["tpu-vm", "create", "demo-worker-0"],
    ]


QUEUED = "projects/rl-project/locations/us-east5-a/queuedResources/{}"


def test_apply_deletes_and_recreates_a_suspended_queued_resource(
    gcloud: Path, write_run_config: Callable[..., Path], tmp_path: Path
) -> None:
    """A preempted Spot queued resource is SUSPENDED, never resumed: it counts as failed."""
    answers = tmp_path / "answers"
    node = "projects/rl-project/locations/us-east5-a/nodes/{}"
    (answers / "tpu-vm-list.json").write_text(
        json.dumps([{"name": node.format(n), "state": "READY"} for n in ("demo-trainer",)])
    )
    (answers / "queued-resources-list.json").write_text(
        json.dumps(
            [
                {"name": QUEUED.format("demo-trainer-qr"), "state": {"state": "ACTIVE"}},
                {"name": QUEUED.format("demo-worker-0-qr"), "state": {"state": "SUSPENDED"}},
                {"name": QUEUED.format("demo-worker-1-qr"), "state": {"state": "PROVISIONING"}},
            ]
        )
    )
    path = write_run_config({**SECTION, "queued_resources": True})
    run_dir = tmp_path / "run"
    assert main(["launch", str(path), "--apply", "--skip-checks", "--run-dir", str(run_dir)]) == 0
    qr = ["gcloud", "compute", "tpus", "queued-resources"]
    assert recorded_commands(gcloud)[2:] == [
        [*qr, "delete", "demo-worker-0-qr", *WHERE, "--force", "--quiet"],
        [
            *qr, "create", "demo-worker-0-qr", "--node-id=demo-worker-0", *WHERE,
            "--accelerator-type=v5p-8", "--runtime-version=v2-alpha-tpuv5", "--spot",
            "--labels=rlax-run=demo,rlax-role=worker",
            f"--metadata-from-file=startup-script={run_dir / 'launch' / 'worker-startup.sh'}",
            "--metadata=rlax-worker-slice=0", "--scopes=cloud-platform",
        ],
    ]  # fmt: skip


def test_status_reads_the_nodes_and_the_queued_resources(
    gcloud: Path,
    write_run_config: Callable[..., Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
) -> None:
    answers = tmp_path / "answers"
    node = "projects/rl-project/locations/us-east5-a/nodes/{}"
    (answers / "tpu-vm-list.json").write_text(
        json.dumps(
            [
                {"name": node.format("demo-trainer"), "state": "READY"},
                {"name": node.format("demo-worker-0"), "state": "PREEMPTED"},
            ]
        )
    )
    (answers / "queued-resources-list.json").write_text(
        json.dumps(
            [
                {
                    "name": QUEUED.format("demo-worker-1-qr"),
                    "state": {"state": "WAITING_FOR_RESOURCES"},
                },
                # Preempted as a Spot queued resource, its node still listed as READY.
                {"name": QUEUED.format("demo-worker-2-qr"), "state": {"state": "SUSPENDING"}},
            ]
        )
    )
    (answers / "tpu-vm-list.json").write_text(
        json.dumps(
            [
                {"name": node.format("demo-trainer"), "state": "READY"},
                {"name": node.format("demo-worker-0"), "state": "PREEMPTED"},
                {"name": node.format("demo-worker-2"), "state": "READY"},
            ]
        )
    )
    path = write_run_config({**SECTION, "queued_resources": True}, workers=3)
    assert main(["launch", str(path), "--status"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[1:]]
    assert [row[:3] for row in rows] == [
        ["trainer", "demo-trainer", "running"],
        ["worker", "demo-worker-0", "failed"],
        ["worker", "demo-worker-1", "starting"],
        ["worker", "demo-worker-2", "failed"],
    ]
    assert recorded_commands(gcloud) == [
        [
            *["gcloud", "compute", "tpus", "tpu-vm", "list", *WHERE],
            *["--filter=labels.rlax-run=demo", "--format=json"],
        ],
        ["gcloud", "compute", "tpus", "queued-resources", "list", *WHERE, "--format=json"],
    ]


def test_stop_checkpoints_the_trainer_then_deletes_every_slice(
    gcloud: Path,
    write_run_config: Callable[..., Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    # One worker slice was preempted and deleted already: that is no error.
    monkeypatch.setenv("FAKE_GCLOUD_FAIL_ON", "demo-worker-1")
    monkeypatch.setenv("FAKE_GCLOUD_FAIL_MESSAGE", "ERROR: NOT_FOUND: node demo-worker-1")
    path = write_run_config(SECTION)
    assert main(["launch", str(path), "--stop"]) == 0
    delete = ["gcloud", "compute", "tpus", "tpu-vm", "delete"]
    assert recorded_commands(gcloud) == [
        [
            *["gcloud", "compute", "tpus", "tpu-vm", "ssh", "demo-trainer", *WHERE, "--worker=all"],
            "--command=sudo systemctl stop rlax-trainer.service; "
            "sudo systemctl stop rlax-transport.service",
        ],
        [*delete, "demo-worker-0", *WHERE, "--quiet"],
        [*delete, "demo-worker-1", *WHERE, "--quiet"],
        [*delete, "demo-trainer", *WHERE, "--quiet"],
    ]
    assert "demo-worker-1 is already gone" in capsys.readouterr().err


def test_stop_deletes_queued_resources_with_force(
    gcloud: Path, write_run_config: Callable[..., Path]
) -> None:
    path = write_run_config({**SECTION, "queued_resources": True})
    assert main(["launch", str(path), "--stop"]) == 0
    deletes = recorded_commands(gcloud)[1:]
    assert deletes[-1] == [
        "gcloud", "compute", "tpus", "queued-resources", "delete", "demo-trainer-qr",
        *WHERE, "--force", "--quiet",
    ]  # fmt: skip
    assert [c[5] for c in deletes] == ["demo-worker-0-qr", "demo-worker-1-qr", "demo-trainer-qr"]
