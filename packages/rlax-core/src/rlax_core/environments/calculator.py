"""The ``calculator`` tool: exact integer and decimal arithmetic on expressions.

It walks Python's own parse tree (:mod:`ast`) of the expression and allows only numbers,
``+ - * / // % **`` and parentheses, so nothing else can run; integers are exact at any
length (Python's), which is what a small model cannot do in its head. Written here
rather than taken from a package because the whole evaluator is this file, with the
limits a training run needs (digits, exponents) where a general evaluator has none.
"""

from __future__ import annotations

import ast
import operator
from fractions import Fraction

from pydantic import BaseModel, Field

from rlax_core.contracts.environment import Tool, ToolError

_BINARY = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}  # fmt: skip
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}


class CalculatorConfig(BaseModel):
    """Settings of the ``calculator`` tool."""

    max_digits: int = Field(
        default=1000, ge=1, description="The most digits of any number it computes."
    )


class Calculator(Tool):
    """Evaluates an arithmetic expression exactly."""

    name = "calculator"
    description = (
        "Evaluates an arithmetic expression exactly: integers of any length, decimals, "
        "+ - * / // % ** and parentheses. Returns the result."
    )

    class Arguments(BaseModel):
        expression: str = Field(description="The expression, e.g. 123456789 * 987654321.")

    def __init__(self, max_digits: int = 1000) -> None:
        self._max_digits = max_digits

    def call(self, arguments: Calculator.Arguments) -> str:
        try:
            tree = ast.parse(arguments.expression.strip(), mode="eval")
        except SyntaxError:
            raise ToolError(f"cannot read {arguments.expression!r} as an expression") from None
        value = self._eval(tree.body)
        if isinstance(value, Fraction):
            return str(value.numerator) if value.denominator == 1 else str(float(value))
        return str(value)

    def _eval(self, node: ast.AST) -> int | Fraction:
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return self._bounded(
                Fraction(node.value) if isinstance(node.value, float) else node.value
            )
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            return _UNARY[type(node.op)](self._eval(node.operand))
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            left, right = self._eval(node.left), self._eval(node.right)
            if isinstance(node.op, ast.Pow):
                if (
                    right != int(right)
                    or abs(right) * len(str(abs(int(left)) or 1)) > 4 * self._max_digits
                ):
                    raise ToolError("the power is too large (or not an integer)")
                right = int(right)
                left = Fraction(left) if right < 0 else left
            if isinstance(node.op, ast.Div):
                left = Fraction(left)
            try:
                return self._bounded(_BINARY[type(node.op)](left, right))
            except ZeroDivisionError:
                raise ToolError("division by zero") from None
        raise ToolError(
            f"only numbers, + - * / // % ** and parentheses are allowed, not {ast.unparse(node)!r}"
        )

    def _bounded(self, value: int | Fraction) -> int | Fraction:
        whole = value if isinstance(value, int) else int(value)
        if len(str(abs(whole))) > self._max_digits:
            raise ToolError(f"the result has more than {self._max_digits} digits")
        return value
