"""Finding the final answer in a completion: pure text work, no parsing of the mathematics.

The markers, in order: the last ``\\boxed{...}`` (or ``\\fbox``), the text after the last
``####`` (GSM8K's answer line), the text after "final answer", "the answer is" or
"answer:". Deciding whether two answers are equal is :mod:`rlax_verifiers.math.equivalence`.
"""

from __future__ import annotations

import re
from fractions import Fraction

_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
_HASHES = re.compile(r"####\s*(?P<answer>[^\n]*)")
_ANSWER = re.compile(
    r"(?i)\b(?:final answer|the answer is|answer)\b\s*(?:is)?\s*[:=]?\s*(?P<answer>[^\n]+)"
)
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?|-?\.\d+")
# The fast path's plain numbers: short, so converting them costs nothing.
_PLAIN_NUMBER = re.compile(r"-?\d{1,40}(?:\.\d{1,40})?")
_TEXT = re.compile(r"\\(?:text|textbf|mathrm|mbox)\s*\{([^{}]*)\}")
_FRAC = re.compile(r"\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}")
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


def after_hashes(text: str) -> str | None:
    """The rest of the line after the last ``####`` (GSM8K's answer line), or None."""
    if "####" not in text:
        return None
    found = list(_HASHES.finditer(text))
    return found[-1].group("answer").strip().rstrip(".") if found else None


def after_answer_word(text: str) -> str | None:
    """The rest of the line after the last "final answer", "the answer is" or "answer:"."""
    found = list(_ANSWER.finditer(text))
    return found[-1].group("answer").strip().rstrip(".") if found else None


def marked_answer(text: str) -> str | None:
    """The answer the completion marked: boxed, after ``####``, or after an answer word."""
    for find in (extract_boxed, after_hashes, after_answer_word):
        answer = find(text)
        if answer is not None:
            return answer
    return None


def last_number(text: str) -> str | None:
    """The last number written in ``text`` (``-1,234.5``, ``3/4``, ``.5``), or None."""
    numbers = _NUMBER.findall(text)
    return numbers[-1] if numbers else None


def extract_answer(text: str) -> str | None:
    """The completion's final answer: boxed, after a marker, or else its last number."""
    answer = marked_answer(text)
    return answer if answer is not None else last_number(text)


def gold_answer(text: str) -> str:
    """The final answer of a problem's ``answer`` field.

    A bare answer is itself; a worked solution gives its last ``\\boxed{}`` (MATH) or the
    text after its last ``####`` (GSM8K).
    """
    for find in (extract_boxed, after_hashes):
        answer = find(text)
        if answer:
            return answer
    return text.strip()


def plain_number(text: str) -> tuple[Fraction, bool] | None:
    """``(value, written_with_decimals)`` if ``text`` is a short plain number, else None.

    Only digits, one optional minus sign and decimal point: what the judge can compare
    without parsing (no separators, exponents, fractions or LaTeX).
    """
    text = text.strip()
    if len(text) > 81 or not _PLAIN_NUMBER.fullmatch(text):
        return None
    return Fraction(text), "." in text


def normalise(answer: str) -> str:
    """Answer text without LaTeX noise, surrounding punctuation and spaces, lower-cased."""
    text = _TEXT.sub(r"\1", answer)
    text = _FRAC.sub(r"(\1)/(\2)", text)
    text = _LATEX_NOISE.sub("", text)
    text = text.replace("\\%", "%").replace("^\\circ", "").replace("^{\\circ}", "")
    text = re.sub(r"\s+", "", text)
    return text.strip(".").strip().lower()
