"""The RL loop: pure algorithms (``algorithms/``) and the roles that run them (``roles/``).

The run's outputs (checkpoints, metrics, status, the process table) live in
:mod:`rlax_core.run_dir`.
"""
