"""The tpu-vm launcher's dry run: the exact gcloud commands and start-up scripts."""

from __future__ import annotations

import importlib.metadata
import os
import shlex
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlax_core.cli.main import main
from rlax_core.config.loading import validate_run_config
from rlax_core.errors import ConfigError
from rlax_core.plugins import BuildContext, Registry
from rlax_launchers.tpu_vm.plan import build_plan

PROJECT = ["--project=rl-project", "--zone=us-east5-a"]
CREATE = ["gcloud", "compute", "tpus", "tpu-vm", "create"]
QUEUE = ["gcloud", "compute", "tpus", "queued-resources", "create"]
JAX = importlib.metadata.version("jax")
GRPC = {"type": "grpc", "address": "10.0.0.1:50051"}


def launcher(**fields: Any) -> dict[str, Any]:
    section = {
        "type": "tpu-vm",
        "project": "rl-project",
        "zone": "us-east5-a",
        "trainer": {"accelerator_type": "v5p-16"},
        "workers": {"accelerator_type": "v5p-8"},
    }
    section.update(fields)
    return section


def plan_for(make_run_config: Callable[..., Any], registry: Registry, tmp_path: Path, **kw: Any):
    run_config = make_run_config(kw.pop("launcher"), **kw)
    return run_config, build_plan(run_config.launcher, run_config, tmp_path / "run", registry)


def test_v5p_16_trainer_and_two_spot_workers_over_nats(
    make_run_config: Callable[..., Any], registry: Registry, tmp_path: Path
) -> None:
    _, plan = plan_for(make_run_config, registry, tmp_path, launcher=launcher())
    trainer_script = tmp_path / "run" / "launch" / "trainer-startup.sh"
    worker_script = tmp_path / "run" / "launch" / "worker-startup.sh"
    assert plan.commands == [
        [
            *CREATE,
            "demo-trainer",
            *PROJECT,
            "--accelerator-type=v5p-16",
            "--version=v2-alpha-tpuv5",
            "--labels=rlax-run=demo,rlax-role=trainer",
            f"--metadata-from-file=startup-script={trainer_script}",
            "--scopes=cloud-platform",
        ],
        *(
            [
                *CREATE,
                f"demo-worker-{i}",
                *PROJECT,
                "--accelerator-type=v5p-8",
                "--version=v2-alpha-tpuv5",
                "--spot",
                "--labels=rlax-run=demo,rlax-role=worker",
                f"--metadata-from-file=startup-script={worker_script}",
                f"--metadata=rlax-worker-slice={i}",
                "--scopes=cloud-platform",
            ]
            for i in range(2)
        ),
    ]
    trainer = plan.scripts[trainer_script]
    # Two hosts: every host runs one trainer process with the jax.distributed settings.
    assert (
        "ExecStart=/opt/rlax/venv/bin/rlax train /etc/rlax/run.yaml --run-dir "
        "gs://bucket/runs/demo --role trainer --coordinator ${COORDINATOR_IP}:8476 "
        "--num-processes 2 --process-id ${PROCESS_ID}\n" in trainer
    )
    assert (
        "ExecStart=/opt/rlax/venv/bin/rlax serve param-server --config /etc/rlax/run.yaml "
        '--set "servers=[\\"tls://0.0.0.0:4222\\"]" '
        '--set "server.store_dir=\\"/var/lib/rlax/transport\\""\n' in trainer
    )
    assert (
        'if [ "$PROCESS_ID" = 0 ]; then systemctl enable rlax-transport.service && '
        "systemctl restart rlax-transport.service; fi\n" in trainer
    )
    # A dry run names the wheels --apply builds (test_tpu_vm_wheels.py: their hashes).
    wheel = "/opt/rlax/wheels/rlax_{}-0.1.0-py3-none-any.whl"
    assert (
        "/opt/rlax/venv/bin/python -m pip install --quiet "
        f"'rlax-core @ file://{wheel.format('core')}' "
        f"'rlax-transport-nats[server] @ file://{wheel.format('transport_nats')}' "
        f"'rlax-verifiers @ file://{wheel.format('verifiers')}' 'jax[tpu]=={JAX}'\n" in trainer
    )
    assert f"UNBUILT  {wheel.format('core')}\n" in trainer
    worker = plan.scripts[worker_script]
    assert (
        "ExecStart=/opt/rlax/venv/bin/rlax train /etc/rlax/run.yaml --run-dir "
        "gs://bucket/runs/demo --role worker --worker-id ${WORKER_ID}\n" in worker
    )
    assert "gcloud compute tpus tpu-vm describe demo-trainer --project=rl-project" in worker
    assert "rlax serve" not in worker


def test_queued_resources_with_a_large_trainer_over_grpc(
    make_run_config: Callable[..., Any], registry: Registry, tmp_path: Path
) -> None:
    section = launcher(
        trainer={"accelerator_type": "v5p-128"},
        workers={"accelerator_type": "v5p-8", "spot": False},
        queued_resources=True,
        network="rl-net",
        service_account="rlax@rl-project.iam.gserviceaccount.com",
        coordinator_port=9000,
    )
    _, plan = plan_for(
        make_run_config, registry, tmp_path, launcher=section, transport=GRPC, workers=3
    )
    script = tmp_path / "run" / "launch" / "trainer-startup.sh"
    assert plan.commands[0] == [
        *QUEUE,
        "demo-trainer-qr",
        "--node-id=demo-trainer",
        *PROJECT,
        "--accelerator-type=v5p-128",
        "--runtime-version=v2-alpha-tpuv5",
        "--labels=rlax-run=demo,rlax-role=trainer",
        f"--metadata-from-file=startup-script={script}",
        "--network=rl-net",
        "--service-account=rlax@rl-project.iam.gserviceaccount.com",
        "--scopes=cloud-platform",
    ]
    assert [c[5] for c in plan.commands[1:]] == [f"demo-worker-{i}-qr" for i in range(3)]
    assert not any("--spot" in c for c in plan.commands)
    trainer = plan.scripts[script]
    assert "# RLAX run demo: trainer slice demo-trainer (16 hosts)" in trainer
    assert (
        "--coordinator ${COORDINATOR_IP}:9000 --num-processes 16 --process-id ${PROCESS_ID}"
        in trainer
    )
    assert (
        "rlax serve param-server --config /etc/rlax/run.yaml "
        '--set "address=\\"0.0.0.0:50051\\"" --set server.bulk_port=50052 '
        '--set "server.state_dir=\\"/var/lib/rlax/transport\\""' in trainer
    )
    assert (
        "gs://bucket/runs/demo/wheels/UNBUILT/rlax_transport_grpc-0.1.0-py3-none-any.whl" in trainer
    )


def test_a_single_host_trainer_has_no_distributed_flags_and_explicit_topology(
    make_run_config: Callable[..., Any], registry: Registry, tmp_path: Path
) -> None:
    section = launcher(
        trainer={"accelerator_type": "v5p-8"},
        workers={"accelerator_type": "v5p-32", "topology": "4x2x2"},
    )
    _, plan = plan_for(make_run_config, registry, tmp_path, launcher=section, workers=8)
    assert [c[5] for c in plan.commands] == ["demo-trainer", "demo-worker-0", "demo-worker-1"]
    assert plan.commands[1][8:10] == ["--type=v5p", "--topology=4x2x2"]
    trainer = next(iter(plan.scripts.values()))
    assert "--role trainer\n" in trainer and "--coordinator" not in trainer
    worker = plan.scripts[tmp_path / "run" / "launch" / "worker-startup.sh"]
    assert "# RLAX run demo: worker slices demo-worker-* (4 hosts each)" in worker


def test_hosts_wait_for_the_dpkg_lock_and_trainer_hosts_restart_with_their_peers(
    make_run_config: Callable[..., Any], registry: Registry, tmp_path: Path
) -> None:
    from rlax_core.cli.train_cmd import PEER_STOPPED

    _, plan = plan_for(make_run_config, registry, tmp_path, launcher=launcher())
    for script in plan.scripts.values():
        assert "APT='apt-get -o DPkg::Lock::Timeout=900'" in script
        assert "$APT update -qq && $APT install -y" in script
    trainer = next(iter(plan.scripts.values()))
    unit = trainer.split("cat > /etc/systemd/system/rlax-trainer.service")[1].split("RLAX_UNIT")[1]
    # A host stopped by a terminated peer exits PEER_STOPPED: not a success, so systemd
    # restarts it; only 143 (asked to stop itself) and 0 are.
    assert "Restart=on-failure" in unit and "SuccessExitStatus=143\n" in unit
    assert str(PEER_STOPPED) not in unit.split("SuccessExitStatus=")[1].split("\n")[0]


def test_the_scripts_carry_a_valid_run_config_pointing_at_the_server(
    make_run_config: Callable[..., Any], registry: Registry, tmp_path: Path
) -> None:
    _, plan = plan_for(make_run_config, registry, tmp_path, launcher=launcher())
    for script in plan.scripts.values():
        text = script.split("<<'RLAX_RUN_CONFIG'\n")[1].split("\nRLAX_RUN_CONFIG\n")[0]
        # TLS: the server's certificate's name, mapped to its address in /etc/hosts.
        settings = yaml.safe_load(text)
        config = validate_run_config(settings, registry)
        assert config.launcher is None
        assert config.transport.servers == ["tls://demo-transport:4222"]
        assert config.run.run_dir == "gs://bucket/runs/demo"


@pytest.mark.parametrize(
    ("endpoints", "coordinator"),
    [
        ("10.0.0.5,10.0.0.6", "10.0.0.5"),
        ("t1v-n-a-w-0:0:10.0.0.7,t1v-n-a-w-1:1:10.0.0.8", "10.0.0.7"),
    ],
)
def test_hosts_derive_process_id_and_coordinator_from_the_metadata_server(
    make_run_config: Callable[..., Any],
    registry: Registry,
    tmp_path: Path,
    endpoints: str,
    coordinator: str,
) -> None:
    """Runs the script's first part in bash with a curl that answers as the metadata server."""
    _, plan = plan_for(make_run_config, registry, tmp_path, launcher=launcher())
    script = next(iter(plan.scripts.values()))
    facts = script.split("# Packages.")[0] + 'echo "$PROCESS_ID $COORDINATOR_IP $TRANSPORT_HOST"\n'
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    curl = bin_dir / "curl"
    curl.write_text(
        "#!/bin/sh\nfor a; do last=$a; done\ncase $last in\n"
        "  */agent-worker-number) echo 1 ;;\n"
        f"  */worker-network-endpoints) echo '{endpoints}' ;;\n"
        "  *) exit 22 ;;\nesac\n"
    )
    curl.chmod(0o755)
    result = subprocess.run(
        ["bash", "-c", facts],
        env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.split() == ["1", coordinator, coordinator]


def test_dry_run_prints_a_shell_script_of_exactly_these_commands(
    write_run_config: Callable[..., Path],
    registry: Registry,
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
) -> None:
    path = write_run_config(launcher())
    run_dir = tmp_path / "out"
    assert main(["launch", str(path), "--dry-run", "--run-dir", str(run_dir)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    # (The start-up scripts' own `gcloud storage cp` lines are no commands of the launch.)
    commands = [shlex.split(line) for line in lines if line.startswith("gcloud compute ")]
    from rlax_core.config import load_run_config

    run_config = load_run_config(path, registry)
    assert commands == build_plan(run_config.launcher, run_config, run_dir, registry).commands
    # Piped to bash it writes the scripts (gcloud itself is left out here).
    script = "\n".join(line for line in lines if not line.startswith("gcloud compute "))
    subprocess.run(["bash", "-c", script], check=True, cwd=tmp_path)
    assert (run_dir / "launch" / "trainer-startup.sh").read_text().startswith("#!/bin/bash\n")


def test_without_apply_nothing_runs_and_the_user_is_told(
    write_run_config: Callable[..., Path], capsys: pytest.CaptureFixture
) -> None:
    path = write_run_config(launcher())
    assert main(["launch", str(path)]) == 0
    captured = capsys.readouterr()
    assert "gcloud compute tpus tpu-vm create demo-trainer" in captured.out
    assert f"run `rlax launch {path} --apply` to create them" in captured.err


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"transport": {"type": "inproc"}}, "transport 'inproc' lives inside one process"),
        ({"run_dir": "/tmp/runs/demo"}, "is a local path, which the hosts of a tpu-vm run"),
        ({"run_dir": None}, "needs a run directory all its hosts share"),
        (
            {"workers": 3, "launcher": launcher(workers={"accelerator_type": "v5p-16"})},
            "rollout.workers is 3, but each worker slice (v5p-16) has 2 hosts",
        ),
        ({"name": "Run_9"}, None),
        ({"launcher": launcher(name="9-lives")}, "launcher.name gives resource name '9-lives'"),
    ],
)
def test_runs_that_cannot_be_placed_are_refused(
    make_run_config: Callable[..., Any],
    registry: Registry,
    tmp_path: Path,
    kwargs: dict[str, Any],
    message: str | None,
) -> None:
    section = kwargs.pop("launcher", launcher())
    run_config = make_run_config(section, **kwargs)
    built = registry.build("launcher", run_config.launcher, BuildContext(registry, run_config))
    if message is None:  # a run name that lowercases into a valid resource name
        assert built.render(run_config, tmp_path)[-1].content.split()[5] == "run-9-worker-1"
        return
    with pytest.raises(ConfigError) as caught:
        built.render(run_config, tmp_path)
    assert message in str(caught.value)


def test_a_topology_that_does_not_match_is_a_config_error_with_its_line(
    write_run_config: Callable[..., Path], capsys: pytest.CaptureFixture
) -> None:
    path = write_run_config(launcher(trainer={"accelerator_type": "v5p-16", "topology": "4x4x4"}))
    assert main(["launch", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "launcher.trainer" in err
    assert "topology 4x4x4 has 64 chips but v5p-16 has 8" in err
