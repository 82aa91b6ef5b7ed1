"""The command line of each process role, exactly as the RL loop defines them.

| role | command |
| --- | --- |
| transport server | ``rlax serve param-server --config RUN.yaml`` (+ ``--set`` overrides) |
| open transport server | + ``--insecure`` (a run without per-run credentials) |
| trainer | ``rlax train RUN.yaml --run-dir DIR --role trainer`` |
| multi-host trainer | + ``--coordinator HOST:PORT --num-processes N --process-id I`` |
| inference worker | ``rlax train RUN.yaml --run-dir DIR --role worker --worker-id ID`` |
| verifier | ``rlax train RUN.yaml --run-dir DIR --role verifier --verifier-id ID`` |

Every launcher builds its commands here, so they never drift apart. No command carries a
secret: credentials are files the run config names (``ps`` shows every argument to
everyone on the host). Values that
are only known on the host (its process id, the coordinator's address) are passed in as
shell variables (``${PROCESS_ID}``) or Kubernetes ``$(VAR)`` references by the caller.
"""

from __future__ import annotations

from rlax_core.config import RunConfigBase
from rlax_core.errors import ConfigError


def transport_server_command(
    config_path: str,
    set_args: list[str],
    *,
    insecure: bool = False,
    run_dir: str | None = None,
) -> list[str]:
    """``rlax serve param-server --config RUN.yaml`` and its ``--set`` overrides.

    Args:
        config_path: the run config on the host.
        set_args: ``--set`` overrides (where to listen and keep state; never a secret).
        insecure: add ``--insecure``: the run opted out of per-run credentials, and
            ``rlax serve`` refuses an open server on a non-loopback address without it.
        run_dir: where the server reports its load for ``rlax status`` (None: the
            config's ``run.run_dir``).
    """
    command = ["rlax", "serve", "param-server", "--config", config_path, *set_args]
    if run_dir is not None:
        command += ["--run-dir", run_dir]
    return [*command, "--insecure"] if insecure else command


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
    return ["rlax", "train", config_path, "--run-dir", run_dir, "--role", "worker",
            "--worker-id", worker_id]  # fmt: skip


def verifier_command(config_path: str, run_dir: str, verifier_id: str) -> list[str]:
    """A verifier (``verifier.placement: stage``): judges on CPU, no accelerator."""
    return ["rlax", "train", config_path, "--run-dir", run_dir, "--role", "verifier",
            "--verifier-id", verifier_id]  # fmt: skip


def verifier_count(run_config: RunConfigBase, configured: int | None) -> int:
    """Verifier processes a launcher starts: ``configured``, else one per embedded thread
    (``verifier.workers``) when the run judges in a stage, else none.

    Raises:
        ConfigError: verifiers are asked for, but the run judges inline.
    """
    staged = run_config.verifier is not None and run_config.verifier.placement == "stage"
    if configured and not staged:
        raise ConfigError(
            f"the launcher is asked for {configured} verifier processes, but "
            "verifier.placement is inline (workers judge their own completions): set "
            "verifier.placement: stage, or verifiers: 0"
        )
    if configured is not None:
        return configured
    return run_config.verifier.workers if staged and run_config.verifier else 0
