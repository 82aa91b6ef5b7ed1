"""Code extraction from completions, and output / return-value comparison."""

from __future__ import annotations

import pytest

from rlax_verifiers.code.compare import output_matches, values_equal
from rlax_verifiers.code.extract import extract_code


@pytest.mark.parametrize(
    ("completion", "code"),
    [
        ("print(1)", "print(1)"),
        ("Sure:\n```python\nprint(1)\n```\nDone.", "print(1)\n"),
        ("```py\na = 1\n```\nthen\n```python\nprint(2)\n```", "print(2)\n"),
        ("first\n```python\nx = 1\n```\nnow the fix:\n```\nprint(3)\n", "print(3)\n"),
        ("```cpp\nint main(){}\n```", "int main(){}\n"),
        ("````python\n```not a fence end```\nprint(4)\n````", "```not a fence end```\nprint(4)\n"),
        ("~~~\nprint(5)\n~~~", "print(5)\n"),
        ("text ``` inline ``` text", "text ``` inline ``` text"),
        ("```python\n```", "\n"),  # an empty last block: no code (the judge says CE)
    ],
)
def test_extract_code_takes_the_last_block(completion: str, code: str) -> None:
    assert extract_code(completion) == code


@pytest.mark.parametrize(
    ("actual", "expected", "tolerance", "equal"),
    [
        ("42\n", "42\n", None, True),
        ("42", "42\n", None, True),
        ("  42   \n\n\n", "42", None, True),
        ("1  2\t3\n", "1 2 3", None, True),
        ("1\n2\n", "1\n2\n3\n", None, False),  # a correct prefix is wrong
        ("1\n2\n3\n", "1\n2\n", None, False),
        ("1 2\n", "1\n2\n", None, False),  # lines must match, not just tokens
        ("0.3333333\n", "0.33333333\n", None, False),
        ("0.3333333\n", "0.33333333\n", 1e-6, True),
        ("0.34\n", "0.33333333\n", 1e-6, False),
        ("abc 0.5\n", "abc 0.5000001\n", 1e-6, True),
        ("nan\n", "nan\n", 1e-6, True),  # identical tokens match before any maths
        ("NaN\n", "nan\n", 1e-6, False),
        ("4\x002\n", "42\n", None, False),
    ],
)
def test_output_matches(actual: str, expected: str, tolerance: float | None, equal: bool) -> None:
    assert output_matches(actual, expected, tolerance) is equal


@pytest.mark.parametrize(
    ("actual", "expected", "tolerance", "equal"),
    [
        (3, 3, None, True),
        ([1, [2, 3]], [1, [2, 3]], None, True),
        ({"a": [1]}, {"a": [1]}, None, True),
        (True, 1, None, False),
        (1, True, None, False),
        (3.0, 3, None, True),
        (0.1 + 0.2, 0.3, None, False),
        (0.1 + 0.2, 0.3, 1e-9, True),
        ([1, 2], [1, 2, 3], None, False),
        ({"a": 1}, {"a": 1, "b": 2}, None, False),
        ("3", 3, None, False),
        (None, None, None, True),
    ],
)
def test_values_equal(
    actual: object, expected: object, tolerance: float | None, equal: bool
) -> None:
    assert values_equal(actual, expected, tolerance) is equal
