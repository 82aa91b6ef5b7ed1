"""The project's Dockerfile: its install step gives every role's command.

CI cannot pull the base image (no container registry is reachable), so the image is not
built here; the install step it runs is, with the same uv command, into a fresh virtual
environment, and the roles' entry points are checked there.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
DOCKERFILE = REPO / "Dockerfile"


def test_the_dockerfile_installs_the_whole_locked_workspace() -> None:
    text = DOCKERFILE.read_text()
    assert "COPY packages ./packages" in text
    assert "COPY pyproject.toml uv.lock README.md ./" in text
    assert re.search(r"^RUN uv sync --locked --no-dev --all-packages --no-editable$", text, re.M)
    assert 'CMD ["rlax", "--help"]' in text


@pytest.mark.slow
def test_its_install_step_gives_every_role_command(tmp_path: Path) -> None:
    (line,) = [ln for ln in DOCKERFILE.read_text().splitlines() if ln.startswith("RUN uv sync")]
    venv = tmp_path / "image-venv"
    env = {**os.environ, "UV_PROJECT_ENVIRONMENT": str(venv)}
    subprocess.run(
        [*shlex.split(line)[1:], "--quiet"],
        cwd=REPO,
        env=env,
        check=True,
        timeout=600,
        capture_output=True,
    )
    listing = subprocess.run(
        [str(venv / "bin" / "rlax"), "plugins", "--json"],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    plugins = {(p["kind"], p["name"]) for p in json.loads(listing.stdout)["plugins"]}
    # The server of either transport, a judge for the workers, the launchers' own init step.
    assert {
        ("transport_server", "nats"),
        ("transport_server", "grpc"),
        ("judge", "math"),
    } <= plugins
    assert (venv / "bin" / "nats-server").exists() or any(venv.rglob("nats-server*"))
    subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import rlax_launchers.gke.config_merge, kubernetes"],
        check=True,
        timeout=120,
    )
    # Without the dev group: no linters in the image.
    assert not (venv / "bin" / "ruff").exists()
