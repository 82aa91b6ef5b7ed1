"""What a run directory holds, and the one place that reads and writes it.

::

    RUN_DIR/
      config.yaml          the resolved run config (layout.py)
      checkpoints/         Orbax step directories (checkpoints.py)
      metrics.jsonl        one JSON object per step (metrics.py)
      tensorboard/         event files (metrics.py, tensorboard.py)
      wandb/, wandb-run-id W&B's local files and run id, with metrics.wandb (wandb_run.py)
      status/<name>.json   each process's role, version and throughput (status.py)
      launcher.json        a local launch's process table (process_table.py)
      logs/                each process's log and the launcher's events (process_table.py)
      preempting/<name>    written by `rlax preempt` before it signals (process_table.py)

Launchers and commands read these files through this package, never each other.
"""
