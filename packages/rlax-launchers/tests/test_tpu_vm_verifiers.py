"""The tpu-vm launcher's verifier machines: CPU instances, rendered and managed with gcloud.

Commands are checked exactly, as the fake gcloud (the ``gcloud`` fixture) records them.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlax_core.cli.main import main
from rlax_core.config.loading import validate_run_config
from rlax_core.errors import ConfigError
from rlax_core.plugins import Registry
from rlax_launchers.testing.fake_gcloud import recorded_commands
from rlax_launchers.tpu_vm.plan import build_plan

PROJECT = "--project=rl-project"
WHERE = [PROJECT, "--zone=us-east5-a"]
STAGE = {"placement": "stage", "workers": 2}
INSTANCES = ["gcloud", "compute", "instances"]
LIST = [
    *INSTANCES,
    "list",
    PROJECT,
    "--filter=labels.rlax-run=demo AND labels.rlax-role=verifier",
    "--format=json",
]

# --apply builds and uploads the RLAX wheels: stand-ins here (see test_tpu_vm_wheels.py).
pytestmark = pytest.mark.usefixtures("stub_wheels")


def launcher(**fields: Any) -> dict[str, Any]:
    return {
        "type": "tpu-vm",
        "project": "rl-project",
        "zone": "us-east5-a",
        "trainer": {"accelerator_type": "v5p-8"},
        "workers": {"accelerator_type": "v5p-8"},
        **fields,
    }


def create(index: int, script: Path, zone: str = "us-east5-a", *extra: str) -> list[str]:
    return [
        *INSTANCES, "create", f"demo-verifier-{index}", PROJECT, f"--zone={zone}",
        "--machine-type=n2-standard-8", "--image-family=ubuntu-2204-lts",
        "--image-project=ubuntu-os-cloud", "--boot-disk-size=50GB",
        "--provisioning-model=SPOT", "--instance-termination-action=STOP",
        "--labels=rlax-run=demo,rlax-role=verifier",
        f"--metadata-from-file=startup-script={script}",
        f"--metadata=rlax-verifier-id=v{index}", *extra, "--scopes=cloud-platform",
    ]  # fmt: skip


def instance(name: str, status: str, zone: str = "us-east5-a") -> dict[str, str]:
    zones = "https://www.googleapis.com/compute/v1/projects/rl-project/zones"
    return {"name": name, "status": status, "zone": f"{zones}/{zone}"}


def test_a_staged_run_creates_cpu_verifier_machines_after_the_slices(
    make_run_config: Callable[..., Any], registry: Registry, tmp_path: Path
) -> None:
    section = launcher(
        verifiers={"count": 3, "zone": "us-east5-b"},
        network="rl-net",
        subnetwork="rl-east5",
        service_account="rlax@rl-project.iam.gserviceaccount.com",
    )
    run_config = make_run_config(section, verifier=STAGE)
    plan = build_plan(run_config.launcher, run_config, tmp_path / "run", registry)
    script = tmp_path / "run" / "launch" / "verifier-startup.sh"
    flags = [
        "--network=rl-net",
        "--subnet=rl-east5",
        "--service-account=rlax@rl-project.iam.gserviceaccount.com",
    ]
    # The slices first: the verifiers wait for the trainer slice's transport server.
    assert plan.commands == [*plan.slice_commands, *plan.verifier_commands]
    assert [c[5] for c in plan.slice_commands] == ["demo-trainer", "demo-worker-0", "demo-worker-1"]
    assert plan.verifier_commands == [create(i, script, "us-east5-b", *flags) for i in range(3)]
    text = plan.scripts[script]
    assert "# RLAX run demo: verifier machines demo-verifier-* (n2-standard-8," in text
    assert (
        "ExecStart=/opt/rlax/venv/bin/rlax train /etc/rlax/run.yaml --run-dir "
        "gs://bucket/runs/demo --role verifier --verifier-id ${VERIFIER_ID}\n" in text
    )
    assert "VERIFIER_ID=$(metadata rlax-verifier-id)\n" in text
    # The transport server is on the trainer slice, in the launcher's zone.
    assert "gcloud compute tpus tpu-vm describe demo-trainer --project=rl-project " in text
    assert "--zone=us-east5-a" in text and "--zone=us-east5-b" not in text
    assert "'jax[cpu]==" in text and "jax[tpu]" not in text
    assert "bubblewrap g++" in text  # the judges' sandboxes run here
    assert "rlax serve" not in text and "--role worker" not in text
    config_text = text.split("<<'RLAX_RUN_CONFIG'\n")[1].split("\nRLAX_RUN_CONFIG\n")[0]
    settings = yaml.safe_load(config_text.replace("__RLAX_TRANSPORT_HOST__", "10.1.2.3"))
    assert validate_run_config(settings, registry).verifier.placement == "stage"


def test_verifier_count_defaults_to_verifier_workers_and_spot_is_optional(
    make_run_config: Callable[..., Any], registry: Registry, tmp_path: Path
) -> None:
    section = launcher(verifiers={"spot": False, "machine_type": "c3-standard-22"})
    run_config = make_run_config(section, verifier=STAGE)
    plan = build_plan(run_config.launcher, run_config, tmp_path / "run", registry)
    assert [c[4] for c in plan.verifier_commands] == ["demo-verifier-0", "demo-verifier-1"]
    assert all("--provisioning-model=SPOT" not in c for c in plan.verifier_commands)
    assert "--machine-type=c3-standard-22" in plan.verifier_commands[0]


def test_a_run_that_judges_inline_has_no_verifier_machines(
    make_run_config: Callable[..., Any], registry: Registry, tmp_path: Path
) -> None:
    run_config = make_run_config(launcher())
    plan = build_plan(run_config.launcher, run_config, tmp_path / "run", registry)
    assert plan.verifier_commands == [] and plan.verifiers == []
    assert all("verifier" not in path.name for path in plan.scripts)
    run_config = make_run_config(launcher(verifiers={"count": 2}))
    with pytest.raises(ConfigError, match="asked for 2 verifier processes, but verifier"):
        build_plan(run_config.launcher, run_config, tmp_path / "run", registry)


def test_a_verifier_machine_finds_its_id_and_looks_up_the_transport_before_each_start(
    make_run_config: Callable[..., Any], registry: Registry, tmp_path: Path
) -> None:
    """Runs the script's first part in bash, with the metadata server faked; the transport
    lookup (the workers' too) is run in test_tpu_vm_startup.py."""
    run_config = make_run_config(launcher(), verifier=STAGE)
    plan = build_plan(run_config.launcher, run_config, tmp_path / "run", registry)
    text = plan.scripts[plan.verifiers[0].script]
    facts = text.split("# Packages.")[0] + 'echo "$PROCESS_ID $VERIFIER_ID"\n'
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "curl").write_text(
        "#!/bin/sh\nfor a; do last=$a; done\ncase $last in\n  */rlax-verifier-id) echo v1 ;;\n"
        "  *) exit 22 ;;\nesac\n"
    )
    (bin_dir / "curl").chmod(0o755)
    result = subprocess.run(
        ["bash", "-c", facts],
        env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"},
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    assert result.stdout.split() == ["0", "v1"]
    assert "ExecStartPre=/etc/rlax/resolve-transport-host\n" in text
    assert "gcloud compute tpus tpu-vm describe demo-trainer --project=rl-project" in text
    # The verifier's RLAX wheels are the workers', without the transport server's extra.
    assert "'rlax-transport-nats @ file:///opt/rlax/wheels/" in text and "[server]" not in text
    assert f"'jax[cpu]=={importlib.metadata.version('jax')}'" in text


def test_apply_creates_the_verifier_machines_after_the_slices(
    gcloud: Path, write_run_config: Callable[..., Path], registry: Registry, tmp_path: Path
) -> None:
    path = write_run_config(launcher(), verifier=STAGE)
    run_dir = tmp_path / "run"
    assert main(["launch", str(path), "--apply", "--skip-checks", "--run-dir", str(run_dir)]) == 0
    script = run_dir / "launch" / "verifier-startup.sh"
    commands = recorded_commands(gcloud)
    assert [c[3:5] for c in commands[:4]] == [
        ["tpu-vm", "list"], ["tpu-vm", "create"], ["tpu-vm", "create"], ["tpu-vm", "create"],
    ]  # fmt: skip
    assert commands[4:] == [LIST, create(0, script), create(1, script)]
    assert script.read_text().startswith("#!/bin/bash\n")


def test_apply_again_recreates_preempted_verifiers_and_deletes_those_beyond_the_count(
    gcloud: Path, write_run_config: Callable[..., Path], tmp_path: Path
) -> None:
    node = "projects/rl-project/locations/us-east5-a/nodes/{}"
    answers = tmp_path / "answers"
    (answers / "tpu-vm-list.json").write_text(
        json.dumps(
            [{"name": node.format(n), "state": "READY"} for n in ("demo-trainer", "demo-worker-0")]
            + [{"name": node.format("demo-worker-1"), "state": "READY"}]
        )
    )
    (answers / "instances-list.json").write_text(
        json.dumps(
            [
                instance("demo-verifier-0", "RUNNING"),
                instance("demo-verifier-1", "TERMINATED", "us-east5-b"),  # a preempted Spot VM
                instance("demo-verifier-2", "RUNNING"),  # from a run with verifiers.count 3
            ]
        )
    )
    path = write_run_config(launcher(), verifier=STAGE)
    run_dir = tmp_path / "run"
    assert main(["launch", str(path), "--apply", "--skip-checks", "--run-dir", str(run_dir)]) == 0
    assert recorded_commands(gcloud)[1:] == [
        LIST,
        [*INSTANCES, "delete", "demo-verifier-1", PROJECT, "--zone=us-east5-b", "--quiet"],
        create(1, run_dir / "launch" / "verifier-startup.sh"),
        [*INSTANCES, "delete", "demo-verifier-2", *WHERE, "--quiet"],
    ]


def test_status_lists_the_verifier_machines(
    gcloud: Path,
    write_run_config: Callable[..., Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
) -> None:
    (tmp_path / "answers" / "instances-list.json").write_text(
        json.dumps([instance("demo-verifier-1", "STAGING"), instance("demo-verifier-7", "RUNNING")])
    )
    path = write_run_config(launcher(), verifier=STAGE)
    assert main(["launch", str(path), "--status"]) == 0
    rows = [line.split()[:3] for line in capsys.readouterr().out.splitlines()[1:]]
    assert [row for row in rows if row[0] == "verifier"] == [
        ["verifier", "demo-verifier-0", "stopped"],
        ["verifier", "demo-verifier-1", "starting"],
        ["verifier", "demo-verifier-7", "running"],  # left over: shown, so it is not forgotten
    ]
    assert recorded_commands(gcloud)[-1] == LIST


def test_stop_deletes_every_verifier_machine_before_the_trainer_slice(
    gcloud: Path, write_run_config: Callable[..., Path], tmp_path: Path
) -> None:
    (tmp_path / "answers" / "instances-list.json").write_text(
        json.dumps(
            [instance("demo-verifier-0", "RUNNING"), instance("demo-verifier-1", "RUNNING", "b")]
        )
    )
    path = write_run_config(launcher(), verifier=STAGE)
    assert main(["launch", str(path), "--stop"]) == 0
    commands = recorded_commands(gcloud)
    assert [c[3:6] for c in commands[:3]] == [
        ["tpu-vm", "ssh", "demo-trainer"],
        ["tpu-vm", "delete", "demo-worker-0"],
        ["tpu-vm", "delete", "demo-worker-1"],
    ]
    assert commands[3:] == [
        LIST,
        [*INSTANCES, "delete", "demo-verifier-0", *WHERE, "--quiet"],
        [*INSTANCES, "delete", "demo-verifier-1", PROJECT, "--zone=b", "--quiet"],
        ["gcloud", "compute", "tpus", "tpu-vm", "delete", "demo-trainer", *WHERE, "--quiet"],
    ]
