"""The tpu-vm start-up scripts: the image's Python, and a transport lookup before every
start of a worker or verifier (a recreated trainer slice has a new address)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlax_core.cli.main import main
from rlax_core.plugins import Registry
from rlax_launchers.testing.fake_gcloud import recorded_commands
from rlax_launchers.tpu_vm.plan import build_plan
from rlax_launchers.tpu_vm.startup import resolve_script, transport_lookup_command

SECTION = {
    "type": "tpu-vm",
    "project": "rl-project",
    "zone": "us-east5-a",
    "trainer": {"accelerator_type": "v5p-16"},
    "workers": {"accelerator_type": "v5p-8"},
}
STAGE = {"placement": "stage", "workers": 1}
LOOKUP = [
    *["gcloud", "compute", "tpus", "tpu-vm", "describe", "demo-trainer"],
    *["--project=rl-project", "--zone=us-east5-a"],
    "--format=value(networkEndpoints[0].ipAddress)",
]


def scripts(make_run_config: Callable[..., Any], registry: Registry, tmp_path: Path, **kw: Any):
    run_config = make_run_config({**SECTION, **kw.pop("launcher", {})}, verifier=STAGE, **kw)
    plan = build_plan(run_config.launcher, run_config, tmp_path / "run", registry)
    return {path.name.split("-")[0]: text for path, text in plan.scripts.items()}


def section(text: str, start: str, end: str) -> str:
    """The lines of ``text`` from the one starting with ``start`` to the one before ``end``."""
    return start + text.split(start, 1)[1].split(end, 1)[0]


@pytest.mark.parametrize(("version", "python"), [(None, "python3.11"), ("3.12", "python3.12")])
def test_the_venv_is_made_with_the_python_apt_installs_never_a_downloaded_one(
    make_run_config: Callable[..., Any],
    registry: Registry,
    tmp_path: Path,
    version: str | None,
    python: str,
) -> None:
    launcher = {} if version is None else {"python_version": version}
    for text in scripts(make_run_config, registry, tmp_path, launcher=launcher).values():
        assert section(text, "$APT update", "# RLAX itself") == (
            "$APT update -qq && $APT install -y -qq --no-install-recommends "
            f"{python} {python}-venv bubblewrap g++\n"
            f"[ -x /opt/rlax/venv/bin/python ] || /usr/bin/{python} -m venv /opt/rlax/venv\n"
            "/opt/rlax/venv/bin/python -m pip install --quiet --upgrade pip\n"
        )
        assert "uv venv" not in text and "pip install --quiet --upgrade uv" not in text


def test_a_python_older_than_rlax_needs_is_a_config_error(
    write_run_config: Callable[..., Path], capsys: pytest.CaptureFixture
) -> None:
    path = write_run_config({**SECTION, "python_version": "3.10"})
    assert main(["launch", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "launcher.python_version" in err and "RLAX needs Python 3.11 or newer, not 3.10" in err
    assert "Traceback" not in err


def test_workers_and_verifiers_look_up_the_transport_before_every_start(
    make_run_config: Callable[..., Any], registry: Registry, tmp_path: Path
) -> None:
    rendered = scripts(make_run_config, registry, tmp_path)
    for role in ("worker", "verifier"):
        text = rendered[role]
        written = "cat > /etc/rlax/resolve-transport-host <<'RLAX_RESOLVE'\n"
        assert section(text, written, "RLAX_RESOLVE\n") == written + resolve_script(
            LOOKUP, transport_name="demo-transport"
        )
        assert "chmod 700 /etc/rlax/resolve-transport-host\n" in text
        # The config is written from the template by the lookup, not at boot.
        assert "cat > /etc/rlax/run.yaml.in <<'RLAX_RUN_CONFIG'\n" in text
        assert "cat > /etc/rlax/run.yaml <<" not in text
        unit = section(text, "[Service]\n", "ExecStart=")
        assert unit == (
            "[Service]\nEnvironmentFile=/etc/rlax/host.env\n"
            "ExecStartPre=/etc/rlax/resolve-transport-host\nTimeoutStartSec=infinity\n"
        )
        name = f"rlax-{role}.service"
        assert f"systemctl enable {name} && systemctl restart --no-block {name}\n" in text
    assert (
        transport_lookup_command(
            trainer_node="demo-trainer", project="rl-project", zone="us-east5-a"
        )
        == LOOKUP
    )
    # The trainer slice runs the transport itself: its address is its host 0's, at boot.
    assert "ExecStartPre" not in rendered["trainer"]
    assert "resolve-transport-host" not in rendered["trainer"]


def test_the_lookup_rewrites_the_config_and_host_env_with_each_new_address(
    make_run_config: Callable[..., Any], registry: Registry, tmp_path: Path, gcloud: Path
) -> None:
    """Runs the rendered lookup in bash (/etc/rlax moved under tmp_path), with the fake
    gcloud answering the trainer slice's address, then a new one (the slice recreated);
    a run without TLS, whose config holds the address."""
    insecure = {"credentials": {"insecure": True}}
    text = scripts(make_run_config, registry, tmp_path, launcher=insecure)["worker"]
    etc = tmp_path / "etc-rlax"
    etc.mkdir()
    template = section(text, "cat > /etc/rlax/run.yaml.in <<'RLAX_RUN_CONFIG'\n", "RLAX_RUN_CONFIG")
    (etc / "run.yaml.in").write_text(template.split("\n", 1)[1])
    (etc / "host.env").write_text("PROCESS_ID=3\nWORKER_ID=1-3\n")
    body = section(text, "#!/bin/bash\n# Finds the transport server", "RLAX_RESOLVE\n")
    script = tmp_path / "resolve-transport-host"
    script.write_text(body.replace("/etc/rlax", str(etc)))
    answers = tmp_path / "answers"
    (answers / "tpu-vm-describe.1.json").write_text("10.0.0.5\n")
    (answers / "tpu-vm-describe.2.json").write_text("10.0.0.9\n")
    for address in ("10.0.0.5", "10.0.0.9"):
        result = subprocess.run(
            ["bash", str(script)], capture_output=True, text=True, timeout=60, check=False
        )
        assert result.returncode == 0, result.stderr
        config = yaml.safe_load((etc / "run.yaml").read_text())
        assert config["transport"]["servers"] == [f"nats://{address}:4222"]
        assert (etc / "host.env").read_text() == (
            f"PROCESS_ID=3\nWORKER_ID=1-3\nTRANSPORT_HOST={address}\n"
        )
        assert oct((etc / "run.yaml").stat().st_mode & 0o777) == "0o600"
    assert recorded_commands(gcloud) == [LOOKUP, LOOKUP]


def test_the_lookup_waits_while_the_trainer_slice_has_no_address(
    tmp_path: Path, gcloud: Path
) -> None:
    etc = tmp_path / "etc-rlax"
    etc.mkdir()
    (etc / "run.yaml.in").write_text("servers: [nats://__RLAX_TRANSPORT_HOST__:4222]\n")
    script = tmp_path / "resolve"
    script.write_text(resolve_script(LOOKUP, retry_s=0).replace("/etc/rlax", str(etc)))
    answers = tmp_path / "answers"
    (answers / "tpu-vm-describe.1.json").write_text("\n")  # being created: no endpoint yet
    (answers / "tpu-vm-describe.3.json").write_text("10.0.0.7\n")  # the 2nd prints nothing
    result = subprocess.run(
        ["bash", str(script)], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stderr.count("no transport server address yet") == 2
    assert (etc / "run.yaml").read_text() == "servers: [nats://10.0.0.7:4222]\n"
    assert (etc / "host.env").read_text() == "TRANSPORT_HOST=10.0.0.7\n"
