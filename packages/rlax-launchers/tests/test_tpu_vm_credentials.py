"""A tpu-vm run's transport is closed by default: each slice's start-up script writes its
role's folder of the run's credentials at /etc/rlax/credentials, and the run config
reaches the server by the name its certificate holds, mapped in /etc/hosts."""

from __future__ import annotations

import stat
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlax_core.cli.main import main
from rlax_core.errors import ConfigError
from rlax_core.kit.launcher import IDENTITY_FILES, generate_run_credentials
from rlax_core.plugins import Registry
from rlax_launchers.run_credentials import PLACEHOLDER, folder_files, read_credential_files
from rlax_launchers.tpu_vm.plan import build_plan

SECTION = {
    "type": "tpu-vm",
    "project": "rl-project",
    "zone": "us-east5-a",
    "trainer": {"accelerator_type": "v5p-16"},
    "workers": {"accelerator_type": "v5p-8"},
}
STAGE = {"placement": "stage", "workers": 1}
MOUNT = "/etc/rlax/credentials"


def scripts(
    make_run_config: Callable[..., Any],
    registry: Registry,
    tmp_path: Path,
    credentials: Any = None,
    **kw: Any,
) -> dict[str, str]:
    run_config = make_run_config({**SECTION, **kw.pop("launcher", {})}, verifier=STAGE, **kw)
    plan = build_plan(
        run_config.launcher, run_config, tmp_path / "run", registry, credentials=credentials
    )
    return {path.name.split("-")[0]: text for path, text in plan.scripts.items()}


def credential_block(text: str) -> str:
    start = "# The run's transport credentials"
    return start + text.split(start, 1)[1].split("\n: > /etc/rlax/host.env", 1)[0] + "\n"


def written_files(text: str) -> list[str]:
    return [
        line.split(f"base64 -d > {MOUNT}/", 1)[1].split(")", 1)[0]
        for line in text.splitlines()
        if f"base64 -d > {MOUNT}/" in line
    ]


def test_each_slice_writes_its_own_role_s_folder_and_a_dry_run_only_placeholders(
    make_run_config: Callable[..., Any], registry: Registry, tmp_path: Path
) -> None:
    rendered = scripts(make_run_config, registry, tmp_path)
    # The trainer slice's hosts: the trainer's folder and the server's (host 0 serves).
    assert sorted(written_files(rendered["trainer"])) == sorted(
        set(folder_files("trainer")) | set(folder_files("server"))
    )
    assert sorted(written_files(rendered["worker"])) == sorted(folder_files("worker"))
    assert sorted(written_files(rendered["verifier"])) == sorted(folder_files("verifier"))
    for role in ("worker", "verifier"):
        assert "signing-key.pem" not in written_files(rendered[role])
        assert "server-key.pem" not in written_files(rendered[role])
    # The run config names the files there, and the server by its certificate's name.
    for text in rendered.values():
        config = text.split("<<'RLAX_RUN_CONFIG'\n")[1].split("\nRLAX_RUN_CONFIG\n")[0]
        transport = yaml.safe_load(config)["transport"]
        assert transport["servers"] == ["tls://demo-transport:4222"]
        assert transport["credentials_file"] == f"{MOUNT}/credential"
        assert transport["server"]["credentials_dir"] == f"{MOUNT}/credentials"
        assert transport["server"]["verify_clients"] is True
        assert "--insecure" not in text


def test_the_written_folder_holds_the_role_s_files_for_root_alone(
    make_run_config: Callable[..., Any], registry: Registry, tmp_path: Path
) -> None:
    made = generate_run_credentials(tmp_path / "creds", ["demo-transport"])
    credentials = read_credential_files(made.folder)
    text = scripts(make_run_config, registry, tmp_path, credentials)["trainer"]
    assert PLACEHOLDER.decode().strip() not in text
    mount = tmp_path / "mount"
    block = credential_block(text).replace(MOUNT, str(mount))
    subprocess.run(["bash", "-euo", "pipefail", "-c", block], check=True, timeout=60)
    assert stat.S_IMODE(mount.stat().st_mode) == 0o700
    for path in folder_files("trainer"):
        assert (mount / path).read_bytes() == (made.roles["trainer"] / path).read_bytes()
        assert stat.S_IMODE((mount / path).stat().st_mode) == 0o600
    for path in folder_files("server"):
        if path in IDENTITY_FILES:  # the host's processes connect as the trainer
            continue
        assert (mount / path).read_bytes() == (made.server / path).read_bytes()


def test_hosts_map_the_server_s_name_to_each_address_they_find(
    make_run_config: Callable[..., Any], registry: Registry, tmp_path: Path, gcloud: Path
) -> None:
    text = scripts(make_run_config, registry, tmp_path)["worker"]
    etc = tmp_path / "etc-rlax"
    etc.mkdir()
    template = text.split("cat > /etc/rlax/run.yaml.in <<'RLAX_RUN_CONFIG'\n")[1]
    (etc / "run.yaml.in").write_text(template.split("RLAX_RUN_CONFIG")[0])
    (etc / "host.env").write_text("PROCESS_ID=0\n")
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 localhost\n")
    body = text.split("<<'RLAX_RESOLVE'\n")[1].split("RLAX_RESOLVE\n")[0]
    script = tmp_path / "resolve"
    script.write_text(body.replace("/etc/rlax", str(etc)).replace("/etc/hosts", str(hosts)))
    answers = tmp_path / "answers"
    (answers / "tpu-vm-describe.1.json").write_text("10.0.0.5\n")
    (answers / "tpu-vm-describe.2.json").write_text("10.0.0.9\n")
    for address in ("10.0.0.5", "10.0.0.9"):
        subprocess.run(["bash", str(script)], check=True, capture_output=True, timeout=60)
        assert hosts.read_text() == f"127.0.0.1 localhost\n{address} demo-transport\n"
        config = yaml.safe_load((etc / "run.yaml").read_text())
        assert config["transport"]["servers"] == ["tls://demo-transport:4222"]
    trainer = scripts(make_run_config, registry, tmp_path)["trainer"]
    assert 'echo "${TRANSPORT_HOST} demo-transport"; } > /etc/hosts.rlax' in trainer


def test_apply_generates_the_credentials_once_and_writes_scripts_for_this_user_alone(
    gcloud: Path,
    write_run_config: Callable[..., Path],
    tmp_path: Path,
    stub_wheels: list[list[Any]],
    capsys: pytest.CaptureFixture,
) -> None:
    path = write_run_config(SECTION)
    run_dir = tmp_path / "run"
    assert main(["launch", str(path), "--dry-run", "--run-dir", str(run_dir)]) == 0
    assert "write placeholders for the run's transport credentials" in capsys.readouterr().err
    assert not run_dir.exists()
    assert main(["launch", str(path), "--apply", "--skip-checks", "--run-dir", str(run_dir)]) == 0
    folder = run_dir / "launch" / "credentials"
    credential = (folder / "worker" / "credential").read_text()
    script = run_dir / "launch" / "worker-startup.sh"
    assert stat.S_IMODE(script.stat().st_mode) == 0o600
    assert stat.S_IMODE((run_dir / "launch").stat().st_mode) == 0o700
    assert credential.split(":")[0] == "worker"
    assert main(["launch", str(path), "--apply", "--skip-checks", "--run-dir", str(run_dir)]) == 0
    assert (folder / "worker" / "credential").read_text() == credential  # reused


def test_without_per_run_credentials_the_server_is_started_insecure(
    make_run_config: Callable[..., Any], registry: Registry, tmp_path: Path
) -> None:
    insecure = {"credentials": {"insecure": True}}
    rendered = scripts(make_run_config, registry, tmp_path, launcher=insecure)
    assert "/etc/rlax/credentials" not in "".join(rendered.values())
    (server,) = [
        line for line in rendered["trainer"].splitlines() if "rlax serve param-server" in line
    ]
    assert server.endswith(" --insecure")
    token = {"type": "grpc", "address": "10.0.0.1:50051", "token": "s3cret-token-1234"}
    with pytest.raises(ConfigError, match=r"transport\.token is set"):
        scripts(make_run_config, registry, tmp_path, transport=token)
