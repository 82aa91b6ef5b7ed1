"""Deciding whether a completion's final answer equals the gold one, with math-verify.

Both sides are parsed into SymPy objects by Hugging Face's ``math-verify`` (LaTeX through
``latex2sympy2_extended``, plain expressions through SymPy), then compared by its
``verify``: numbers, fractions in any spelling, roots, percentages, units, sets,
intervals, tuples, matrices, equations (``x = 3`` against ``3``) and expressions
(``x + 1`` against ``1 + x``). Two plain numbers are compared here instead: exactly when
both are exact (integers, fractions), within a relative tolerance when either was written
as a decimal.

Nothing here bounds its own time or memory: math-verify's signal-based timeouts are
turned off (they only work in a main thread) and :mod:`rlax_verifiers.math.pool` runs this
code in worker processes with a deadline and an address-space limit instead. Importing
this module imports SymPy (about three seconds), which is why the judge does not.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

import sympy
from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

from rlax_verifiers.math.answers import (
    after_answer_word,
    after_hashes,
    extract_boxed,
    gold_answer,
    last_number,
    normalise,
)
from rlax_verifiers.math.options import MatchOptions

# math-verify warns once that its timeouts are off, and logs every failed parse: the pool
# bounds the work, and a failed parse is an ordinary wrong answer.
logging.getLogger("math_verify").setLevel(logging.ERROR)

_LATEX = (LatexExtractionConfig(boxed_match_priority=0),)
_ANCHORED = (
    LatexExtractionConfig(try_extract_without_anchor=False, boxed_match_priority=-1),
    ExprExtractionConfig(try_extract_without_anchor=False),
)
_UNANCHORED = (LatexExtractionConfig(), ExprExtractionConfig())
_DELIMITERS = (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"))
# 1 000, 1\,000, 1{,}000, 1\ 000: digit groups of a number. LaTeX would read the space
# as a product (1 000 = 1*0) and the rest as a set, so the separators go first.
_GROUPED = re.compile(r"-?\d{1,3}(?:(?:\s|\\[,;: !]|~|\{,\})+\d{3})+(?:\.\d+)?")
_GROUP_SEP = re.compile(r"\s|\\[,;: !]|~|\{,\}")
_SCIENTIFIC = re.compile(r"(-?\d+(?:\.\d+)?)[eE]([+-]?\d+)")
# "18 dollars", "5 apples": a number followed by words, none of them mathematics.
_NUMBER_AND_WORDS = re.compile(r"(\\?\$?-?[\d.,]+)\s*((?:[A-Za-z]{2,}\.?\s*)+)")
_MATH_WORDS = frozenset({"pi", "sqrt", "ln", "log", "sin", "cos", "tan", "exp", "or", "and"})
# Prose: a word of three letters or more once LaTeX commands and \text{} are taken out.
_COMMAND_OR_TEXT = re.compile(r"\\(?:text|mathrm|textbf|mbox)\s*\{[^{}]*\}|\\[A-Za-z]+")
_WORD = re.compile(r"[A-Za-z]{3,}")
_SYNONYMS = (("\\varnothing", "\\emptyset"), ("\\dfrac", "\\frac"), ("\\tfrac", "\\frac"))


@dataclass(frozen=True)
class Parsed:
    """What was read from one side: SymPy candidates and the text they came from."""

    values: tuple[object, ...]
    text: str | None


def _split(found: list[object]) -> Parsed:
    values = tuple(x for x in found if not isinstance(x, str))
    texts = [x for x in found if isinstance(x, str)]
    return Parsed(values, texts[0] if texts else None)


def _unwrap(answer: str) -> str:
    text = answer.strip().rstrip(".").strip()
    for left, right in _DELIMITERS:
        if len(text) > len(left) + len(right) and text.startswith(left) and text.endswith(right):
            inner = text[len(left) : -len(right)]
            # "$x$ and $y$" is two formulas, not one wrapped in a pair of dollars.
            return inner.strip() if left not in inner and right not in inner else text
    return text


def _rewrite(answer: str) -> str:
    """An answer written so that the LaTeX parser reads it as meant."""
    text = answer.replace("°", "^\\circ")
    for spelling, known in _SYNONYMS:
        text = text.replace(spelling, known)
    if _GROUPED.fullmatch(text):
        return _GROUP_SEP.sub("", text)
    text = _SCIENTIFIC.sub(r"\1\\times 10^{\2}", text)
    words = _NUMBER_AND_WORDS.fullmatch(text)
    if words and not {w.lower().rstrip(".") for w in words.group(2).split()} & _MATH_WORDS:
        return words.group(1)
    return text


def _is_bare(text: str) -> bool:
    """Whether a whole unmarked completion is just an answer (``\\sqrt3``), not prose."""
    text = text.strip()
    return (
        0 < len(text) <= 200
        and "\n" not in text
        and not _WORD.search(_COMMAND_OR_TEXT.sub(" ", text))
    )


def parse_answer(answer: str) -> Parsed:
    """Parses a bare answer: a gold, a boxed content, the text after a marker."""
    text = _rewrite(_unwrap(answer))
    if not text:
        return Parsed((), None)
    found = parse(f"\\boxed{{{text}}}", _LATEX, parsing_timeout=None)
    parsed = _split(found)
    if parsed.values:
        return parsed
    # Prose around the answer ("5 apples and 3 pears"): math-verify's own extraction.
    rest = _split(parse(text, _UNANCHORED, parsing_timeout=None))
    return Parsed(rest.values, parsed.text or rest.text or text)


def parse_gold(gold: str) -> Parsed:
    """Parses a problem's ``answer`` field (a bare answer or a worked solution)."""
    return parse_answer(gold_answer(gold))


def parse_prediction(completion: str, options: MatchOptions) -> Parsed:
    """Finds and parses a completion's final answer.

    In order: the last ``\\boxed{}``, the text after the last ``####``, an answer that
    math-verify finds after "final answer is" or "answer", the text after RLAX's answer
    words, and (when ``accept_unmarked``) the last expression or number of the text.
    """
    for find in (extract_boxed, after_hashes):
        marked = find(completion)
        if marked is not None:
            return parse_answer(marked)
    anchored = _split(parse(completion, _ANCHORED, parsing_timeout=None))
    if anchored.values:
        return anchored
    marked = after_answer_word(completion)
    if marked is not None:
        parsed = parse_answer(marked)
        if parsed.values or not options.accept_unmarked:
            return parsed
    if not options.accept_unmarked:
        return Parsed((), None)
    if _is_bare(completion):
        bare = parse_answer(completion)
        if bare.values:
            return bare
    found = _split(parse(completion, _UNANCHORED, parsing_timeout=None))
    if found.values:
        return found
    number = last_number(completion)
    return parse_answer(number) if number is not None else Parsed((), None)


def _numbers_equal(gold: sympy.Number, pred: sympy.Number, rel_tol: float) -> bool:
    if gold == pred:
        return True
    if not (gold.is_finite and pred.is_finite):
        return False
    if isinstance(gold, sympy.Float) or isinstance(pred, sympy.Float):
        # In SymPy arithmetic, so that numbers beyond a float's range do not overflow.
        scale = max(abs(gold), abs(pred))
        return bool(abs(gold - pred) <= sympy.Float(rel_tol) * scale)
    return False


def values_equal(gold: object, pred: object, options: MatchOptions) -> bool:
    """Whether one parsed gold value equals one parsed predicted value."""
    if isinstance(gold, sympy.Number) and isinstance(pred, sympy.Number):
        return _numbers_equal(gold, pred, options.rel_tol)
    return verify(
        gold,
        pred,
        float_rounding=options.float_rounding,
        strict=options.strict,
        allow_set_relation_comp=options.allow_set_relation_comp,
        timeout_seconds=None,
    )


def parsed_equal(gold: Parsed, pred: Parsed, options: MatchOptions) -> bool:
    """Whether any reading of the gold equals any reading of the prediction.

    When neither side parsed, their texts are compared without LaTeX noise.
    """
    if any(values_equal(g, p, options) for g in gold.values for p in pred.values):
        return True
    if gold.text and pred.text and not (gold.values and pred.values):
        return normalise(gold.text) == normalise(pred.text) != ""
    return False


def answers_match(predicted: str, expected: str, *, rel_tol: float = 1e-6) -> bool:
    """Whether two bare answers are equal (numbers within ``rel_tol``).

    In-process and unbounded: for trusted text. The judge runs untrusted completions in
    its worker pool.
    """
    options = MatchOptions(rel_tol=rel_tol)
    return parsed_equal(parse_answer(expected), parse_answer(predicted), options)


def judge_text(gold: str, completion: str, options: MatchOptions) -> tuple[bool, str]:
    """``(correct, detail)`` for one completion; the detail names what was answered."""
    expected = parse_gold(gold)
    predicted = parse_prediction(completion, options)
    if not predicted.values and not predicted.text:
        return False, "no answer found"
    if parsed_equal(expected, predicted, options):
        return True, ""
    return False, f"answered {(predicted.text or '')[:80]!r}"
