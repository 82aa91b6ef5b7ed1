"""Comparing what a program produced with what was expected, outside the sandbox.

Standard output: both sides are split into lines and each line into whitespace-separated
tokens; trailing blank lines are ignored; every line must match, so a correct prefix of
the answer is wrong. Numbers compare within a tolerance only when the problem gives one.

Return values: JSON values of plain types compare structurally (a tuple came back as a
list); ``True`` is not ``1``; floats within the tolerance when one is given, else exactly.
"""

from __future__ import annotations

import math
from typing import Any


def output_matches(actual: str, expected: str, float_tolerance: float | None = None) -> bool:
    """Whether ``actual`` stdout equals ``expected`` (see module docstring)."""
    got, want = _lines(actual), _lines(expected)
    if len(got) != len(want):
        return False
    for got_line, want_line in zip(got, want, strict=True):
        if len(got_line) != len(want_line):
            return False
        for a, b in zip(got_line, want_line, strict=True):
            if a != b and not (float_tolerance is not None and _close(a, b, float_tolerance)):
                return False
    return True


def _lines(text: str) -> list[list[str]]:
    lines = [line.split() for line in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _close(a: str, b: str, tolerance: float) -> bool:
    try:
        x, y = float(a), float(b)
    except ValueError:
        return False
    return _floats_close(x, y, tolerance)


def _floats_close(x: float, y: float, tolerance: float) -> bool:
    if math.isnan(x) or math.isnan(y):
        return False
    return math.isclose(x, y, rel_tol=tolerance, abs_tol=tolerance)


def values_equal(actual: Any, expected: Any, float_tolerance: float | None = None) -> bool:
    """Whether two JSON values are equal (see module docstring)."""
    if isinstance(expected, bool) or isinstance(actual, bool):
        return type(actual) is type(expected) and actual == expected
    if isinstance(expected, (int, float)) and isinstance(actual, (int, float)):
        if float_tolerance is not None:
            return _floats_close(float(actual), float(expected), float_tolerance)
        return actual == expected
    if isinstance(expected, (list, tuple)):
        return (
            isinstance(actual, (list, tuple))
            and len(actual) == len(expected)
            and all(
                values_equal(a, e, float_tolerance) for a, e in zip(actual, expected, strict=True)
            )
        )
    if isinstance(expected, dict):
        return (
            isinstance(actual, dict)
            and actual.keys() == expected.keys()
            and all(values_equal(actual[k], expected[k], float_tolerance) for k in expected)
        )
    return type(actual) is type(expected) and actual == expected
