"""Finding the final answer in a completion and deciding whether two answers are equal.

Equal means: the same number (integers, decimals, fractions, ``\\frac``, percentages and
thousands separators all compare by value, decimals within a relative tolerance), or the
same text after LaTeX noise is removed (``\\left``, ``\\!``, ``\\text{}``, ``$``, spaces).
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
_MARKERS = (
    re.compile(r"####\s*(?P<answer>[^\n]+)"),
    re.compile(r"(?i)(?:final answer|the answer is|answer)\s*(?:is)?\s*[:=]?\s*(?P<answer>[^\n]+)"),
)
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?|-?\.\d+")
_FRAC = re.compile(r"\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}")
_TEXT = re.compile(r"\\(?:text|textbf|mathrm|mbox)\s*\{([^{}]*)\}")
_LATEX_NOISE = re.compile(r"\\left|\\right|\\[,;:! ]|\\displaystyle|\$")


def extract_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` (braces balanced), or None."""
    starts = [m.end() for m in _BOXED.finditer(text)]
    for start in reversed(starts):
        depth = 1
        for i in range(start, len(text)):
            if text[i] == "{":
                depth += 1
            elif text[i] == "}":
                depth -= 1
                if depth == 0:
                    return text[start:i].strip()
    return None


def extract_answer(text: str) -> str | None:
    """The completion's final answer: boxed, after a marker, or else its last number."""
    boxed = extract_boxed(text)
    if boxed is not None:
        return boxed
    for marker in _MARKERS:
        found = list(marker.finditer(text))
        if found:
            return found[-1].group("answer").strip().rstrip(".")
    numbers = _NUMBER.findall(text)
    return numbers[-1] if numbers else None


def normalise(answer: str) -> str:
    """Answer text without LaTeX noise, surrounding punctuation and spaces."""
    text = _TEXT.sub(r"\1", answer)
    text = _FRAC.sub(r"(\1)/(\2)", text)
    text = _LATEX_NOISE.sub("", text)
    text = text.replace("\\%", "%").replace("^\\circ", "").replace("^{\\circ}", "")
    text = re.sub(r"\s+", "", text)
    return text.strip(".").strip()


def as_number(answer: str) -> Fraction | None:
    """The answer's value if it is a plain number (``-1,234.5``, ``3/4``, ``50%``)."""
    text = normalise(answer)
    percent = text.endswith("%")
    text = text.rstrip("%")
    text = re.sub(r"^\((-?[\d.]+)\)/\((-?[\d.]+)\)$", r"\1/\2", text)
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", text):
        text = text.replace(",", "")
    try:
        if re.fullmatch(r"-?\d+/\d+", text):
            num, den = text.split("/")
            if int(den) == 0:
                return None
            value = Fraction(int(num), int(den))
        elif re.fullmatch(r"-?(\d+\.?\d*|\.\d+)(e-?\d+)?", text):
            value = Fraction(text)
        else:
            return None
    except (ValueError, ZeroDivisionError):
        return None
    return value / 100 if percent else value


def answers_match(predicted: str, expected: str, *, rel_tol: float = 1e-6) -> bool:
    """Whether two answers are the same number (within ``rel_tol``) or the same text."""
    a, b = as_number(predicted), as_number(expected)
    if a is not None and b is not None:
        if a == b:
            return True
        return math.isclose(float(a), float(b), rel_tol=rel_tol, abs_tol=0.0)
    return normalise(predicted).lower() == normalise(expected).lower()
