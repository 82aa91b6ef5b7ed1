"""The docker launcher: what it would run (``--dry-run``), what it refuses, and what
``--stop`` removes. A real docker-launched run, under chaos, is in tests/test_chaos.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlax_core.cli.main import main
from rlax_core.kit.launcher import MOUNT_DIR
from rlax_core.plugins import Registry
from rlax_launchers.docker.launcher import DockerLauncher
from rlax_launchers.docker.plan import LABEL_RUN_DIR
from rlax_launchers.testing.chaos_config import chaos_run_config

REPO = Path(__file__).resolve().parents[3]
QUICKSTART = REPO / "examples" / "quickstart.yaml"


@pytest.fixture(scope="module")
def empty_image() -> str:
    """An image with nothing in it, imported here: containers of it are made, never run."""
    import io
    import tarfile

    import docker

    client = docker.from_env()
    if client.images.list(name="rlax-test:empty"):
        return "rlax-test:empty"
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        info = tarfile.TarInfo("empty")
        tar.addfile(info, io.BytesIO(b""))
    client.api.import_image_from_data(archive.getvalue(), repository="rlax-test", tag="empty")
    return "rlax-test:empty"


def _config(tmp_path: Path, transport: str = "grpc", **launcher: Any) -> Path:
    return chaos_run_config(
        QUICKSTART, tmp_path, transport,  # type: ignore[arg-type]
        verifiers=1, launcher={"type": "docker", "workers": 2, **launcher},
    )  # fmt: skip


def _dry_run(config: Path, run_dir: Path, capsys: pytest.CaptureFixture[str]) -> list[str]:
    assert main(["launch", str(config), "--run-dir", str(run_dir), "--dry-run"]) == 0
    return capsys.readouterr().out.splitlines()


def _docker_run(lines: list[str], name: str) -> str:
    (line,) = [ln for ln in lines if ln.startswith("docker run ") and f"{name} " in f"{ln} "]
    return line


def _container_config(lines: list[str], run_dir: Path) -> dict[str, Any]:
    start = lines.index(f"cat > {run_dir / 'launch' / 'run.yaml'} <<'RLAX_SCRIPT_END'")
    end = lines.index("RLAX_SCRIPT_END", start)
    return yaml.safe_load("\n".join(lines[start + 1 : end]))


def test_a_dry_run_prints_each_container_as_a_docker_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _config(tmp_path, resources={"worker": {"cpus": 1.5, "memory": "4g"}})
    run_dir = tmp_path / "run"
    lines = _dry_run(config, run_dir, capsys)
    runs = [ln for ln in lines if ln.startswith("docker run ")]
    assert len(runs) == 5  # transport, trainer, w0, w1, v0: the server first
    assert "rlax serve param-server" in runs[0]
    prefix = _docker_run(lines, "--role trainer").split("--name ")[1].split("-trainer")[0]
    assert prefix.startswith("rlax-chaos-grpc-")
    labels = f"--label rlax.run=chaos-grpc --label {LABEL_RUN_DIR}={run_dir}"
    assert f"docker network create {labels} {prefix}" in lines
    assert (
        f"rlax credentials {run_dir}/launch/credentials --server-host {prefix}-transport" in lines
    )
    assert not (run_dir / "launch").exists()  # a dry run generates no credentials

    worker = _docker_run(lines, f"--name {prefix}-w1")
    assert worker.endswith("--role worker --worker-id w1")
    for flag in (
        "--detach --init",
        f"--network {prefix}",
        f"--label {LABEL_RUN_DIR}={run_dir} --label rlax.process=w1 --label rlax.role=worker",
        f"--mount type=bind,source={run_dir},target={run_dir} ",
        f"--mount type=bind,source={REPO}/examples/quickstart/tokenizer,"
        f"target={REPO}/examples/quickstart/tokenizer,readonly",
        f"--mount type=bind,source={run_dir}/launch/credentials/worker,target={MOUNT_DIR},readonly",
        "--env HOME=/tmp",
        "--cpus 1.5 --memory 4g rlax:cpu rlax train",
    ):
        assert flag in worker, flag
    # Each role mounts its own credentials, and only those; the trainer has no limits.
    trainer = _docker_run(lines, f"--name {prefix}-trainer")
    assert f"credentials/trainer,target={MOUNT_DIR}" in trainer and "--cpus" not in trainer
    assert f"credentials/server,target={MOUNT_DIR}" in runs[0]
    assert f"credentials/verifier,target={MOUNT_DIR}" in _docker_run(lines, f"--name {prefix}-v0")

    # The containers' config: paths absolute, the transport at the server's container,
    # with TLS and a credential per role from the mounted folder; no launcher section.
    settings = _container_config(lines, run_dir)
    assert "launcher" not in settings
    assert settings["model"]["tokenizer"] == f"{REPO}/examples/quickstart/tokenizer"
    port = yaml.safe_load(config.read_text())["transport"]["address"].rsplit(":", 1)[1]
    assert settings["transport"]["address"] == f"{prefix}-transport:{port}"
    assert settings["transport"]["credentials_file"] == f"{MOUNT_DIR}/credential"
    assert f"--set 'address=\"0.0.0.0:{port}\"'" in runs[0]


def test_on_the_host_network_the_server_listens_on_loopback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _config(tmp_path, "nats", network="host", credentials={"insecure": True})
    run_dir = tmp_path / "run"
    lines = _dry_run(config, run_dir, capsys)
    assert not [ln for ln in lines if "docker network create" in ln or "rlax credentials" in ln]
    port = yaml.safe_load(config.read_text())["transport"]["servers"][0].rsplit(":", 1)[1]
    server = next(ln for ln in lines if ln.startswith("docker run "))
    assert "--network host" in server and "--hostname" not in server
    assert f"""--set 'servers=["nats://127.0.0.1:{port}"]'""" in server
    assert server.endswith("--insecure") and MOUNT_DIR not in server
    settings = _container_config(lines, run_dir)
    assert settings["transport"]["servers"] == [f"nats://127.0.0.1:{port}"]


@pytest.mark.parametrize(
    ("launcher", "message"),
    [
        ({"resources": {"gpu": {"cpus": 1}}}, "no role gpu"),
        ({"resources": {"worker": {"memory": "lots"}}}, "'lots' is not a memory size"),
        ({"volumes": ["data:/data"]}, "'data:/data' is not a bind mount"),
        ({"volumes": ["/data:/data:rx"]}, "'/data:/data:rx' is not a bind mount"),
    ],
)
def test_bad_launcher_settings_are_refused_by_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], launcher: dict[str, Any], message: str
) -> None:
    config = _config(tmp_path, **launcher)
    assert main(["launch", str(config), "--run-dir", str(tmp_path / "run"), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_a_run_inside_one_process_cannot_be_placed_in_containers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _config(tmp_path)
    data = yaml.safe_load(config.read_text())
    data["transport"] = {"type": "inproc"}
    config.write_text(yaml.safe_dump(data))
    assert main(["launch", str(config), "--run-dir", str(tmp_path / "run"), "--dry-run"]) == 2
    assert "set transport.type to nats or grpc" in capsys.readouterr().err


def test_without_an_engine_the_launch_says_so_and_starts_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    run_dir = tmp_path / "run"
    assert main(["launch", str(_config(tmp_path)), "--run-dir", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert "needs a Docker engine, and none answers at unix://" in err
    assert "Traceback" not in err and not (run_dir / "launch").exists()


@pytest.mark.docker
def test_a_missing_image_or_mount_is_refused_before_anything_is_made(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], empty_image: str
) -> None:
    run_dir = tmp_path / "run"
    config = _config(tmp_path, image="rlax:no-such-image")
    assert main(["launch", str(config), "--run-dir", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert "'rlax:no-such-image' is not on this Docker engine" in err
    assert "python -m rlax_launchers.docker.image" in err

    import docker

    client = docker.from_env()
    config = _config(tmp_path, image=empty_image, volumes=[f"{tmp_path}/absent:/data:ro"])
    assert main(["launch", str(config), "--run-dir", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert f"would mount {tmp_path}/absent, which does not exist here" in err
    assert not (run_dir / "launch").exists()
    assert client.networks.list(filters={"label": f"{LABEL_RUN_DIR}={run_dir}"}) == []


@pytest.mark.docker
def test_stop_removes_the_runs_containers_and_nothing_else(
    tmp_path: Path, registry: Registry, empty_image: str
) -> None:
    import docker

    client = docker.from_env()
    image = empty_image
    run_dir = (tmp_path / "run").resolve()
    run_dir.mkdir()
    ours = [
        client.containers.create(image, ["true"], labels={LABEL_RUN_DIR: str(run_dir)})
        for _ in range(2)
    ]
    network = client.networks.create(
        f"rlax-test-{tmp_path.name}", labels={LABEL_RUN_DIR: str(run_dir)}
    )
    theirs = client.containers.create(
        image, ["true"], labels={LABEL_RUN_DIR: str(tmp_path / "another-run")}
    )
    try:
        from rlax_launchers.docker.config import DockerLauncherConfig

        # No process table: the launcher that made them is gone.
        DockerLauncher(DockerLauncherConfig(), registry, None).stop(run_dir)
        for container in ours:
            with pytest.raises(docker.errors.NotFound):
                container.reload()
        with pytest.raises(docker.errors.NotFound):
            network.reload()
        theirs.reload()  # still there
    finally:
        theirs.remove(force=True)


def test_the_container_is_in_the_process_table_and_status(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from rlax_core.kit.launcher import ProcessEntry, ProcessTable, collect_status, write_table

    entry = ProcessEntry(name="w0", role="worker", state="stopped", log="logs/w0.log",
                         container="rlax-demo-abc123-w0")  # fmt: skip
    write_table(tmp_path, ProcessTable(launcher_pid=1, updated_at=0.0, processes=(entry,)))
    rows, _ = collect_status(tmp_path)
    assert rows[0].container == "rlax-demo-abc123-w0"
    assert main(["status", str(tmp_path)]) == 0
    assert "containers: w0 rlax-demo-abc123-w0" in capsys.readouterr().out
    assert json.loads(entry.model_dump_json())["container"] == "rlax-demo-abc123-w0"
