"""--apply builds the run's RLAX wheels (for real, with uv, once for this module), ships
them to the run directory, and every start-up script installs exactly those files,
checked by exactly their sha256.

The bucket is fake-gcs-server's, which the launcher uploads to through gcsfs as it would
to Cloud Storage; the tests read it back into a local folder, and the hosts' ``gcloud
storage cp`` is a ``cp`` from there.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import shutil
import subprocess
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlax_core.cli.main import main
from rlax_core.storage import filesystem, storage_path
from rlax_core.testing.object_stores import clear_client_caches, start_fake_gcs
from rlax_launchers.run_packages import RunPackage
from rlax_launchers.testing.fake_gcloud import install_fake_gcloud
from rlax_launchers.tpu_vm.wheels import Wheel, upload_wheels

pytestmark = pytest.mark.network  # fake-gcs-server

SECTION = {
    "type": "tpu-vm",
    "project": "rl-project",
    "zone": "us-east5-a",
    "trainer": {"accelerator_type": "v5p-8"},
    "workers": {"accelerator_type": "v5p-8"},
}
RUN = {
    "run": {"name": "demo", "run_dir": "gs://bucket/runs/demo"},
    "model": {"path": "gs://bucket/models/Qwen2.5-0.5B-Instruct"},
    "data": {
        "train": [
            {
                "path": "gs://bucket/data/train.jsonl",
                "prompt_template": "{question}",
                "answer_field": "answer",
            }
        ]
    },
    "rollout": {"workers": 1, "max_new_tokens": 16},
    "trainer": {"mesh": {"fsdp": 4}},  # the v5p-8 trainer slice's 4 chips
    "transport": {"type": "nats", "servers": ["nats://10.0.0.1:4222"]},
    "verifier": {"judge": {"type": "math"}, "placement": "stage", "workers": 1},
    "launcher": SECTION,
}
SHIPPED = {"rlax_core": None, "rlax_transport_nats": "server", "rlax_verifiers": None}


@dataclass
class Applied:
    run_dir: Path
    bucket: Path  # what gs://bucket holds
    built: dict[str, Path]  # distribution (as in a wheel's name) → the wheel --apply built


@pytest.fixture(scope="module")
def applied(tmp_path_factory: pytest.TempPathFactory) -> Applied:
    if not (os.environ.get("UV") or shutil.which("uv")):  # `uv run` sets $UV
        pytest.fail("uv is not on PATH (nor in $UV); run the tests through ./scripts/test")
    root = tmp_path_factory.mktemp("applied")
    bucket = root / "bucket"
    config = root / "demo.yaml"
    config.write_text(yaml.safe_dump(RUN, sort_keys=False))
    run_dir = root / "run"
    (root / "answers").mkdir()
    store = start_fake_gcs(root / "gcs", bucket="bucket")
    try:
        with pytest.MonkeyPatch.context() as patch:
            for key, value in store.env.items():
                patch.setenv(key, value)
            clear_client_caches()
            patch.setenv("PATH", f"{install_fake_gcloud(root / 'bin').parent}:{os.environ['PATH']}")
            patch.setenv("FAKE_GCLOUD_LOG", str(root / "gcloud.log"))
            patch.setenv("FAKE_GCLOUD_DIR", str(root / "answers"))
            command = ["launch", str(config), "--apply", "--skip-checks", "--run-dir", str(run_dir)]
            assert main(command) == 0
            uploaded = filesystem(storage_path("gs://bucket/runs")).find("gs://bucket/runs")
            for url in uploaded:  # what the bucket holds, as a local folder
                target = bucket / url.removeprefix("bucket/")
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(storage_path(f"gs://{url}").read_bytes())
    finally:
        store.stop()
        clear_client_caches()
    built = {p.name.split("-")[0]: p for p in (run_dir / "launch" / "wheels").glob("*.whl")}
    return Applied(run_dir, bucket, built)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_apply_builds_the_wheels_of_exactly_the_packages_the_run_uses(applied: Applied) -> None:
    assert sorted(applied.built) == sorted(SHIPPED)
    for distribution, path in applied.built.items():
        assert path.name == f"{distribution}-0.1.0-py3-none-any.whl"
        with zipfile.ZipFile(path) as wheel:
            metadata = wheel.read(f"{distribution}-0.1.0.dist-info/METADATA").decode()
        assert f"Name: {distribution.replace('_', '-')}\n" in metadata


def test_the_bucket_holds_each_wheel_in_a_folder_named_by_its_content(applied: Applied) -> None:
    uploaded = sorted(p.relative_to(applied.bucket) for p in applied.bucket.rglob("*.whl"))
    assert uploaded == sorted(
        Path("runs/demo/wheels") / sha256(p)[:16] / p.name for p in applied.built.values()
    )
    for path in applied.built.values():
        copy = applied.bucket / "runs/demo/wheels" / sha256(path)[:16] / path.name
        assert copy.read_bytes() == path.read_bytes()


@pytest.mark.parametrize("script", ["trainer", "worker", "verifier"])
def test_each_script_installs_exactly_those_files_with_exactly_their_hashes(
    applied: Applied, script: str
) -> None:
    text = (applied.run_dir / "launch" / f"{script}-startup.sh").read_text()
    install = text.split("rm -rf /opt/rlax/wheels")[1].split("\n\n")[0].splitlines()[1:]
    built = [applied.built[name] for name in SHIPPED]  # in the run's order: core first
    urls = [f"gs://bucket/runs/demo/wheels/{sha256(p)[:16]}/{p.name}" for p in built]
    jax = "cpu" if script == "verifier" else "tpu"
    extras = {
        name: f"[{extra}]" if extra and script != "verifier" else ""
        for name, extra in SHIPPED.items()
    }
    requirements = " ".join(
        f"'{p.name.split('-')[0].replace('_', '-')}{extras[p.name.split('-')[0]]} @ "
        f"file:///opt/rlax/wheels/{p.name}'"
        for p in built
    )
    assert install == [
        f"gcloud storage cp {' '.join(urls)} /opt/rlax/wheels/",
        "sha256sum --check --strict <<'RLAX_WHEELS'",
        *(f"{sha256(p)}  /opt/rlax/wheels/{p.name}" for p in built),
        "RLAX_WHEELS",
        f"/opt/rlax/venv/bin/python -m pip install --quiet {requirements} "
        f"'jax[{jax}]=={importlib.metadata.version('jax')}'",
    ]
    assert "UNBUILT" not in text


def test_the_rendered_check_passes_these_wheels_and_stops_a_changed_one(
    applied: Applied, tmp_path: Path
) -> None:
    """Runs the script's copy and check in bash, gcloud copying from the local bucket."""
    bucket = tmp_path / "bucket"
    shutil.copytree(applied.bucket, bucket)
    text = (applied.run_dir / "launch" / "worker-startup.sh").read_text()
    check = "rm -rf /opt/rlax/wheels" + text.split("rm -rf /opt/rlax/wheels")[1]
    check = check.split("RLAX_WHEELS\n/opt/rlax/venv")[0] + "RLAX_WHEELS\n"
    check = "set -euo pipefail\n" + check.replace("/opt/rlax/wheels", str(tmp_path / "wheels"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "gcloud").write_text(
        '#!/bin/bash\n[ "$1 $2" = "storage cp" ] || exit 1\nshift 2\n'
        f'args=("${{@/#gs:\\/\\/bucket\\//{bucket}/}}")\ncp "${{args[@]}}"\n'
    )
    (bin_dir / "gcloud").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}

    def run() -> subprocess.CompletedProcess:
        return subprocess.run(
            ["bash", "-c", check], env=env, capture_output=True, text=True, timeout=60
        )

    result = run()
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (tmp_path / "wheels").iterdir()) == sorted(
        p.name for p in applied.built.values()
    )
    (changed,) = bucket.rglob("rlax_core-*.whl")
    changed.write_bytes(changed.read_bytes() + b"\0")
    result = run()
    assert result.returncode != 0
    assert "rlax_core-0.1.0-py3-none-any.whl: FAILED" in result.stdout


def test_upload_copies_each_wheel_once(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    built = tmp_path / "rlax_core-0.1.0-py3-none-any.whl"
    built.write_bytes(b"wheel")
    target = tmp_path / "bucket" / "wheels" / "abc" / built.name
    target.parent.mkdir(parents=True)
    wheel = Wheel(RunPackage("rlax-core", "0.1.0"), built.name, sha256(built), str(target))
    upload_wheels([built], [wheel])
    assert target.read_bytes() == b"wheel"
    assert f"uploading {built.name}" in capsys.readouterr().err
    upload_wheels([built], [wheel])  # the same content, at the same place: not again
    assert "uploading" not in capsys.readouterr().err


def test_dry_run_builds_nothing_and_says_the_hashes_are_placeholders(
    write_run_config: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    path = write_run_config(SECTION)
    run_dir = tmp_path / "run"
    assert main(["launch", str(path), "--dry-run", "--run-dir", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert "# (A dry run: --apply builds and uploads the wheels" in out
    assert "UNBUILT  /opt/rlax/wheels/rlax_core-0.1.0-py3-none-any.whl\n" in out
    assert not (run_dir / "launch" / "wheels").exists()


@pytest.mark.parametrize("pip_packages", [None, ["rlax-core==0.1.0", "jax[tpu]"]])
def test_wheels_need_a_gcs_run_dir_unless_pip_packages_are_given(
    write_run_config: Callable[..., Path],
    capsys: pytest.CaptureFixture,
    pip_packages: list[str] | None,
) -> None:
    section: dict[str, Any] = {**SECTION, "pip_packages": pip_packages}
    path = write_run_config(section, run_dir="s3://bucket/runs/demo")
    code = main(["launch", str(path), "--dry-run"])
    captured = capsys.readouterr()
    if pip_packages is None:
        assert code == 2
        assert "copy the RLAX wheels from the run directory with `gcloud storage`" in captured.err
        assert "Traceback" not in captured.err
    else:
        assert code == 0
        assert (
            "/opt/rlax/venv/bin/python -m pip install --quiet rlax-core==0.1.0 'jax[tpu]'\n"
            in captured.out
        )
        assert "sha256sum" not in captured.out


def test_apply_without_uv_is_a_clear_error(
    write_run_config: Callable[..., Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv("UV", raising=False)
    path = write_run_config(SECTION)
    assert main(["launch", str(path), "--apply", "--skip-checks", "--run-dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "uv is not on PATH, so the RLAX wheels the TPU VMs install cannot be built" in err
    assert "Traceback" not in err
