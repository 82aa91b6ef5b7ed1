"""No rendered command line holds a secret: ``ps`` shows every argument to everyone on a
host, and ``kubectl get pod -o yaml`` every container's command to whoever may read pods.

Each launcher is rendered with real credentials (the per-run ones, and a run's own token
where it opts out of them), and every argv it would run is searched for every secret.
"""

from __future__ import annotations

import base64
import shlex
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rlax_core.kit.launcher import generate_run_credentials
from rlax_core.plugins import Registry
from rlax_launchers.gke.manifests import render_manifests
from rlax_launchers.run_credentials import CredentialFiles, read_credential_files
from rlax_launchers.tpu_vm.plan import build_plan

TOKEN = "own-token-0123456789abcdef"
GKE = {
    "type": "gke",
    "image": "us-docker.pkg.dev/rl-project/rlax/rlax:0.1.0",
    "trainer": {"accelerator_type": "v5p-16"},
    "workers": {"accelerator_type": "v5p-8"},
}
TPU_VM = {
    "type": "tpu-vm",
    "project": "rl-project",
    "zone": "us-east5-a",
    "trainer": {"accelerator_type": "v5p-16"},
    "workers": {"accelerator_type": "v5p-8"},
}
STAGE = {"placement": "stage", "workers": 1}
INSECURE = {"credentials": {"insecure": True}}


def secrets_of(credentials: CredentialFiles) -> list[str]:
    """Every secret of a run's credentials, as it could appear in a command: each role's
    secret, and each line of each private key's PEM body (and their base64)."""
    found = []
    for folder in credentials.folders.values():
        for path, content in folder.items():
            text = content.decode()
            if path == "credential" or path.startswith("credentials/"):
                found.append(text.strip().split(":", 1)[1])
            elif "PRIVATE KEY" in text:
                found += [line for line in text.splitlines() if "-----" not in line]
            found.append(base64.b64encode(content).decode()[:40])
    return found


def container_argvs(manifest: Any) -> Iterator[list[str]]:
    """The command, args and env values of every container (init ones too) in an object."""
    if isinstance(manifest, dict):
        if "image" in manifest and "name" in manifest:
            yield [*manifest.get("command", []), *manifest.get("args", [])]
            yield [str(e.get("value", "")) for e in manifest.get("env", [])]
        for value in manifest.values():
            yield from container_argvs(value)
    elif isinstance(manifest, list):
        for value in manifest:
            yield from container_argvs(value)


def assert_no_secret(argvs: list[list[str]], secrets: list[str]) -> None:
    assert argvs, "no command lines were found to search"
    joined = "\n".join(shlex.join(argv) for argv in argvs)
    leaked = [s for s in secrets if s and s in joined]
    assert leaked == []


def test_the_search_finds_a_secret_on_a_command_line(tmp_path: Path) -> None:
    """The check has teeth: a token in a --set, a role's secret, a key's line."""
    credentials = read_credential_files(
        generate_run_credentials(tmp_path / "creds", ["demo-transport"]).folder
    )
    secret = credentials.folders["worker"]["credential"].decode().strip()
    key_line = credentials.folders["trainer"]["signing-key.pem"].decode().splitlines()[1]
    for argv in (["--set", f"token={TOKEN}"], ["--credential", secret], ["echo", key_line]):
        with pytest.raises(AssertionError):
            assert_no_secret([["rlax", "serve", *argv]], [TOKEN, *secrets_of(credentials)])


def test_no_gke_container_command_holds_a_secret(
    make_run_config: Callable[..., Any], tmp_path: Path
) -> None:
    made = generate_run_credentials(tmp_path / "creds", ["demo-transport"])
    credentials = read_credential_files(made.folder)
    run_config = make_run_config(GKE, verifier=STAGE)
    items = render_manifests(run_config.launcher, run_config, credentials).items
    argvs = [argv for item in items for argv in container_argvs(item)]
    assert any(argv[:3] == ["rlax", "serve", "param-server"] for argv in argvs)
    assert_no_secret(argvs, secrets_of(credentials))

    # A run with its own token: in a Secret, merged by an init container; in no argv.
    transport = {"type": "grpc", "address": "10.0.0.1:50051", "token": TOKEN}
    run_config = make_run_config({**GKE, **INSECURE}, verifier=STAGE, transport=transport)
    items = render_manifests(run_config.launcher, run_config).items
    assert_no_secret([argv for item in items for argv in container_argvs(item)], [TOKEN])
    (config_map,) = [m for m in items if m["kind"] == "ConfigMap"]
    assert TOKEN not in config_map["data"]["run.yaml"]


def test_no_tpu_vm_command_or_unit_holds_a_secret(
    make_run_config: Callable[..., Any], registry: Registry, tmp_path: Path
) -> None:
    made = generate_run_credentials(tmp_path / "creds", ["demo-transport"])
    credentials = read_credential_files(made.folder)
    run_config = make_run_config(TPU_VM, verifier=STAGE)
    run_dir = tmp_path / "run"
    plan = build_plan(run_config.launcher, run_config, run_dir, registry, None, credentials)
    assert_no_secret(tpu_vm_argvs(plan), secrets_of(credentials))

    transport = {"type": "grpc", "address": "10.0.0.1:50051", "token": TOKEN}
    run_config = make_run_config({**TPU_VM, **INSECURE}, verifier=STAGE, transport=transport)
    plan = build_plan(run_config.launcher, run_config, tmp_path / "run", registry)
    assert_no_secret(tpu_vm_argvs(plan), [TOKEN])


def tpu_vm_argvs(plan: Any) -> list[list[str]]:
    """The gcloud commands, and every systemd unit's ExecStart and ExecStartPre."""
    argvs = [list(command) for command in plan.commands]
    for text in plan.scripts.values():
        for line in text.splitlines():
            if line.startswith(("ExecStart=", "ExecStartPre=")):
                argvs.append(shlex.split(line.split("=", 1)[1]))
    assert any("param-server" in argv for argv in argvs)
    return argvs
