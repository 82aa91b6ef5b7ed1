"""The roles of a run: controller, inference worker and trainer, and how each starts.

:mod:`~rlax_core.rl.roles.start` is where ``rlax train`` dispatches: the embedded run,
a trainer process or a worker process. Every role builds its parts from the run config
through :mod:`~rlax_core.rl.roles.components`.
"""
