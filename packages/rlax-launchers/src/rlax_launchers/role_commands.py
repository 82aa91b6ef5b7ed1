"""The command line of each process role, exactly as the RL loop defines them.

| role | command |
| --- | --- |
| transport server | ``rlax serve param-server --config RUN.yaml`` (+ ``--set`` overrides) |
| trainer | ``rlax train RUN.yaml --run-dir DIR --role trainer`` |
| multi-host trainer | + ``--coordinator HOST:PORT --num-processes N --process-id I`` |
| inference worker | ``rlax train RUN.yaml --run-dir DIR --role worker --worker-id ID`` |

Both cloud launchers build their commands here, so they never drift apart. Values that
are only known on the host (its process id, the coordinator's address) are passed in as
shell variables (``${PROCESS_ID}``) or Kubernetes ``$(VAR)`` references by the caller.
"""

from __future__ import annotations


def transport_server_command(config_path: str, set_args: list[str]) -> list[str]:
    """``rlax serve param-server --config RUN.yaml`` and its ``--set`` overrides."""
    return ["rlax", "serve", "param-server", "--config", config_path, *set_args]


def trainer_command(
    config_path: str,
    run_dir: str,
    *,
    num_processes: int,
    coordinator: str,
    process_id: str,
) -> list[str]:
    """The trainer; with ``num_processes > 1`` the ``jax.distributed`` settings too.

    Args:
        config_path: the run config on the host.
        run_dir: the shared run directory.
        num_processes: trainer processes (hosts of the trainer slice).
        coordinator: ``HOST:PORT`` of process 0 (ignored for one process).
        process_id: this process's index, usually a variable the host expands.
    """
    command = ["rlax", "train", config_path, "--run-dir", run_dir, "--role", "trainer"]
    if num_processes > 1:
        command += [
            "--coordinator",
            coordinator,
            "--num-processes",
            str(num_processes),
            "--process-id",
            process_id,
        ]
    return command


def worker_command(config_path: str, run_dir: str, worker_id: str) -> list[str]:
    """An inference worker."""
    return [
        "rlax",
        "train",
        config_path,
        "--run-dir",
        run_dir,
        "--role",
        "worker",
        "--worker-id",
        worker_id,
    ]
