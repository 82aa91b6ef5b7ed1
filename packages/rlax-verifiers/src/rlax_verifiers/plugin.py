"""The rlax-verifiers plugin module, loaded through its ``rlax`` entry point."""

from __future__ import annotations

from rlax_core.hookspecs import Register, hookimpl
from rlax_verifiers.math.judge import MathJudgeConfig, make_math_judge


@hookimpl
def register_judges(register: Register) -> None:
    """Registers the ``math`` judge."""
    register("math", make_math_judge, MathJudgeConfig)
