"""The RLAX image built offline, and run: the plugins, a config check, a short training.

No registry is reachable here, so the image comes from :mod:`rlax_launchers.docker.image`:
Debian packages, the locked wheels and the workspace, in the Dockerfile's steps.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import docker
import pytest

from rlax_launchers.docker.image import DEFAULT_TAG, ensure_rlax_image, find_checkout
from rlax_launchers.testing.docker_image import checkout_image

# Runs beside the other multi-process tests (conftest's groups), which share the image.
pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.distributed]

REPO = Path(__file__).resolve().parents[3]


def _run(image: str, command: list[str], **options: object) -> str:
    # A long wait: the client's default read timeout (60 s) is shorter than a training.
    return docker.from_env(timeout=900).containers.run(
        image, command, remove=True, network_mode="none", user=f"{os.getuid()}:{os.getgid()}",
        environment={"HOME": "/tmp"}, **options,
    ).decode()  # fmt: skip


def test_the_image_is_built_once_then_found_by_its_tag() -> None:
    tag = checkout_image()
    assert tag.startswith("rlax:cpu-")
    client = docker.from_env()
    steps: list[str] = []
    assert ensure_rlax_image(client, find_checkout(REPO), log=steps.append) == tag
    assert steps == []  # a lookup: nothing was built
    assert client.images.get(DEFAULT_TAG).id == client.images.get(tag).id
    image = client.images.get(tag)
    print(f"{tag}: {image.attrs['Size'] / 1e9:.2f} GB")  # for the record
    assert image.attrs["Config"]["Cmd"] == ["rlax", "--help"]
    assert image.attrs["Config"]["WorkingDir"] == "/opt/rlax"


def test_the_image_lists_every_plugin() -> None:
    plugins = {
        (p["kind"], p["name"])
        for p in json.loads(_run(checkout_image(), ["rlax", "plugins", "--json"]))["plugins"]
    }
    assert {
        ("transport_server", "nats"),
        ("transport_server", "grpc"),
        ("judge", "math"),
        ("launcher", "docker"),
        ("launcher", "gke"),
    } <= plugins


def test_the_image_checks_a_config_and_trains(tmp_path: Path) -> None:
    examples = REPO / "examples"
    mounts = {
        str(examples): {"bind": str(examples), "mode": "ro"},
        str(tmp_path): {"bind": str(tmp_path), "mode": "rw"},
    }
    config = str(examples / "quickstart.yaml")
    checked = _run(checkout_image(), ["rlax", "config", "check", config], volumes=mounts)
    assert "valid run config" in checked, checked
    run_dir = tmp_path / "run"
    sets = [
        "trainer.total_steps=2",
        "trainer.warmup_steps=0",
        "warm_start.steps=2",
        "eval.every_steps=0",
        "eval.max_prompts=8",
        "rollout.prompts_per_step=4",
        "rollout.groups_per_batch=4",
    ]
    _run(
        checkout_image(),
        ["rlax", "train", config, "--run-dir", str(run_dir), "--no-progress",
         *[arg for s in sets for arg in ("--set", s)]],
        volumes=mounts,
    )  # fmt: skip
    steps = [
        json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()
    ]
    assert steps[-1] == 2
    assert (run_dir / "final" / "config.json").exists()
    assert (run_dir / "final").stat().st_uid == os.getuid()  # the files stay the user's
