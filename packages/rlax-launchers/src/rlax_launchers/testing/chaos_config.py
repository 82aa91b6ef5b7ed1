"""The run the chaos test and ``rlax bench chaos`` launch: the quickstart, shortened.

The quickstart (a 2-layer Qwen-architecture model learning to reverse four-digit
numbers, with a supervised warm start) over a networked transport, with 3 worker
processes and, judging for them in the verifier stage, 2 verifier processes; 40 RL
steps, short leases so a killed process's items come back within seconds, and an
evaluation at the start and at the end only.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any, Literal

import yaml

TOTAL_STEPS = 40
WORKERS = 3
VERIFIERS = 2
MAX_STALENESS = 1


def free_port() -> int:
    """A loopback TCP port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def chaos_run_config(
    quickstart: Path,
    directory: Path,
    transport: Literal["nats", "grpc"],
    *,
    total_steps: int = TOTAL_STEPS,
    seed: int = 0,
    verifiers: int = VERIFIERS,
    launcher: dict[str, Any] | None = None,
    rollout: dict[str, Any] | None = None,
) -> Path:
    """Writes the run config and returns its path.

    Args:
        quickstart: ``examples/quickstart.yaml`` of the repository (its data and tokenizer
            are referred to by absolute paths).
        directory: where to write ``<transport>.yaml``.
        transport: ``nats`` or ``grpc``, on a free loopback port; the launcher keeps the
            server's state in the run directory.
        total_steps: RL steps.
        seed: the run's seed.
        verifiers: verifier processes (0: the workers judge inline).
        launcher: changes to the local launcher's settings.
        rollout: changes to the rollout section (the engine, in-flight updates).
    """
    config = yaml.safe_load(quickstart.read_text())
    base = quickstart.parent
    config["run"] = {"name": f"chaos-{transport}", "seed": seed}
    config["model"]["tokenizer"] = str(base / config["model"]["tokenizer"])
    for section in (*config["data"]["train"], config["data"]["eval"]):
        section["path"] = str(base / section["path"])
    config["trainer"]["total_steps"] = total_steps
    config["eval"] = {"every_steps": 0, "samples_per_prompt": 4, "ks": [1, 4], "max_prompts": 64}
    config["checkpoint"] = {"every_steps": 5}
    config["staleness"]["max_staleness"] = MAX_STALENESS
    config["rollout"].update({"workers": WORKERS, "groups_per_batch": 8, "lease_s": 10,
                              **(rollout or {})})  # fmt: skip
    if verifiers:
        config["verifier"].update({"placement": "stage", "groups_per_batch": 8})
    port = free_port()
    if transport == "nats":
        config["transport"] = {"type": "nats", "servers": [f"nats://127.0.0.1:{port}"]}
    else:
        config["transport"] = {"type": "grpc", "address": f"127.0.0.1:{port}"}
    config["launcher"] = {
        "type": "local",
        "restart_backoff_s": 0.5,
        "max_backoff_s": 4.0,
        "stable_after_s": 20.0,
        "stop_grace_s": 10.0,
        "verifiers": verifiers,
        **(launcher or {}),
    }
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{transport}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path
