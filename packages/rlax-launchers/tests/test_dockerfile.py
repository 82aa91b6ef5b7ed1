"""The project's Dockerfile and the offline build run the same steps.

CI cannot pull the Dockerfile's base image (no registry is reachable), so the image is
built here by :mod:`rlax_launchers.docker.image` (test_docker_image.py builds and runs
it); these tests hold the two paths to one install step and one image config.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from rlax_launchers.docker.image import IMAGE_CHANGES, INSTALL_COMMAND, UV_ENV, VENV_DIR

REPO = Path(__file__).resolve().parents[3]
DOCKERFILE = REPO / "Dockerfile"


def test_the_dockerfile_installs_the_whole_locked_workspace() -> None:
    text = DOCKERFILE.read_text()
    assert "COPY packages ./packages" in text
    assert "COPY pyproject.toml uv.lock README.md ./" in text
    assert "packages/*/tests" in (REPO / ".dockerignore").read_text().split()


def test_the_offline_build_runs_the_dockerfiles_install_step() -> None:
    text = DOCKERFILE.read_text()
    assert re.search(rf"^RUN {re.escape(INSTALL_COMMAND)}$", text, re.M)
    env = dict(re.findall(r"^\s*(?:ENV )?(UV_\w+)=(\S+)", text, re.M))
    assert env == UV_ENV
    assert f"PATH={VENV_DIR}/bin:$PATH" in text


def test_both_images_have_one_config() -> None:
    text = DOCKERFILE.read_text()
    workdir = re.findall(r"^WORKDIR (\S+)$", text, re.M)[-1]
    (cmd,) = re.findall(r"^CMD (.+)$", text, re.M)
    assert f"WORKDIR {workdir}" in IMAGE_CHANGES
    assert f"CMD {json.dumps(json.loads(cmd))}" in IMAGE_CHANGES
