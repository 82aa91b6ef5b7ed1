"""How the math judge compares answers, as plain values its worker processes receive."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MatchOptions:
    """How answers are compared (the judge's config, as plain values for the workers).

    Attributes:
        rel_tol: relative tolerance for two numbers when either was written as a decimal.
        float_rounding: decimal places math-verify rounds floats to inside expressions,
            sets and matrices.
        strict: math-verify's strict mode: variables must match and a set is not a tuple.
        allow_set_relation_comp: compare an inequality with a set (``1 < x < 2``
            against ``(1, 2)``) whichever side the relation is on.
        accept_unmarked: judge a completion without a marker by its last expression.
    """

    rel_tol: float = 1e-6
    float_rounding: int = 6
    strict: bool = True
    allow_set_relation_comp: bool = False
    accept_unmarked: bool = True
