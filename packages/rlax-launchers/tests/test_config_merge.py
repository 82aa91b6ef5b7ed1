"""The gke init container merges the Secret's credentials into the run config (a real process)."""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

import yaml


def run_merge(*args: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rlax_launchers.gke.config_merge", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_credentials_land_in_the_transport_section_of_a_private_file(tmp_path: Path) -> None:
    base = tmp_path / "base.yaml"
    base.write_text(yaml.safe_dump({"run": {"name": "demo"}, "transport": {"type": "grpc"}}))
    credentials = tmp_path / "credentials.yaml"
    credentials.write_text(yaml.safe_dump({"token": "s3cret"}))
    out = tmp_path / "run" / "run.yaml"
    result = run_merge(base, credentials, out)
    assert result.returncode == 0, result.stderr
    assert yaml.safe_load(out.read_text()) == {
        "run": {"name": "demo"},
        "transport": {"type": "grpc", "token": "s3cret"},
    }
    assert stat.S_IMODE(out.stat().st_mode) == 0o600


def test_a_missing_or_malformed_input_exits_2_with_one_line(tmp_path: Path) -> None:
    base = tmp_path / "base.yaml"
    base.write_text("- not\n- a mapping\n")
    result = run_merge(base, tmp_path / "missing.yaml", tmp_path / "out.yaml")
    assert result.returncode == 2
    assert result.stderr.strip() == f"error: {base} does not hold a YAML mapping"
    base.write_text("run: {name: demo}\n")
    result = run_merge(base, tmp_path / "missing.yaml", tmp_path / "out.yaml")
    assert (result.returncode, "cannot read" in result.stderr) == (2, True)
    assert not (tmp_path / "out.yaml").exists()
