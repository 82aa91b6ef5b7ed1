"""The math judge: final-answer extraction and equivalence.

Names are imported on first use: the judge's worker processes import
``rlax_verifiers.math.pool`` and must not pay for rlax-core (the judge) or the parent for
SymPy (the equivalence), which this package's ``__init__`` would otherwise load.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlax_verifiers.math.answers import extract_answer
    from rlax_verifiers.math.equivalence import answers_match
    from rlax_verifiers.math.judge import MathJudge, MathJudgeConfig

_HOMES = {
    "MathJudge": "rlax_verifiers.math.judge",
    "MathJudgeConfig": "rlax_verifiers.math.judge",
    "answers_match": "rlax_verifiers.math.equivalence",
    "extract_answer": "rlax_verifiers.math.answers",
}

__all__ = ["MathJudge", "MathJudgeConfig", "answers_match", "extract_answer"]


def __getattr__(name: str) -> Any:
    """Imports ``name`` from its module the first time it is asked for."""
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_HOMES[name]), name)
