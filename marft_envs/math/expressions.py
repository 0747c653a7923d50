"""LaTeX formatting of exact numbers and the expression trees behind generated problems.

Helpers of :mod:`marft_envs.math.generator`: numbers written the way the MATH benchmark writes
answers (``\\frac{3}{4}``, ``-7``), linear and quadratic expressions, and random arithmetic
expressions evaluated step by step with exact :class:`fractions.Fraction` arithmetic.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from fractions import Fraction

__all__ = [
    "RetryDraw",
    "fmt_decimal",
    "fmt_linear",
    "fmt_linear2",
    "fmt_number",
    "fmt_operand",
    "fmt_quadratic",
    "fmt_raw_fraction",
    "random_expression",
]


class RetryDraw(Exception):
    """Raised by a family's ``make`` when a draw is degenerate; the generator draws again."""


def fmt_number(value: Fraction | int) -> str:
    """An exact number as MATH writes answers: ``7``, ``-7``, ``\\frac{3}{4}``, ``-\\frac{3}{4}``."""
    value = Fraction(value)
    if value.denominator == 1:
        return str(value.numerator)
    sign = "-" if value < 0 else ""
    return f"{sign}\\frac{{{abs(value.numerator)}}}{{{value.denominator}}}"


def fmt_decimal(value: Fraction) -> str:
    """A terminating decimal without trailing zeros (``82.5``); exact by construction."""
    scaled, places = Fraction(value), 0
    while scaled.denominator != 1:
        if places > 30:
            raise ValueError(f"{value} has no terminating decimal expansion")
        scaled, places = scaled * 10, places + 1
    digits = str(abs(scaled.numerator)).rjust(places + 1, "0")
    text = digits if places == 0 else f"{digits[:-places]}.{digits[-places:]}"
    return f"-{text}" if value < 0 else text


def fmt_operand(value: Fraction | int) -> str:
    """A number as an operand: negative numbers get parentheses."""
    return f"({fmt_number(value)})" if value < 0 else fmt_number(value)


def fmt_raw_fraction(num: int, den: int) -> str:
    """An unreduced fraction (intermediate steps show ``\\frac{9}{12}`` before reducing)."""
    sign = "-" if num * den < 0 else ""
    return f"{sign}\\frac{{{abs(num)}}}{{{abs(den)}}}"


def fmt_linear(a: int, b: int, var: str = "x") -> str:
    """``a x + b`` as text: ``3x + 5``, ``x - 4``, ``-x``, ``7``."""
    head = "" if a == 0 else var if a == 1 else f"-{var}" if a == -1 else f"{a}{var}"
    if not head:
        return str(b)
    return head if b == 0 else f"{head} {'+' if b > 0 else '-'} {abs(b)}"


def fmt_linear2(a: int, b: int, c: Fraction | int) -> str:
    """The equation ``a x + b y = c`` as text (``2x - y = 7``)."""
    y_term = "y" if abs(b) == 1 else f"{abs(b)}y"
    return f"{fmt_linear(a, 0)} {'+' if b > 0 else '-'} {y_term} = {fmt_number(c)}"


def fmt_quadratic(a: int, b: int, c: int) -> str:
    """``a x^2 + b x + c`` as text (``2x^2 + 5x - 3``)."""
    text = "x^2" if a == 1 else f"{a}x^2"
    if b:
        text += f" {'+' if b > 0 else '-'} {'' if abs(b) == 1 else abs(b)}x"
    if c:
        text += f" {'+' if c > 0 else '-'} {abs(c)}"
    return text


# --- expression trees (arithmetic and fractions) ----------------------------------------------

_PREC = {"+": 1, "-": 1, "*": 2, "/": 2}
_SYM = {"+": "+", "-": "-", "*": "\\times", "/": "\\div"}


@dataclass
class _Expr:
    """A binary expression tree over exact numbers; ``op`` is ``None`` for a leaf."""

    value: Fraction
    op: str | None = None
    left: _Expr | None = None
    right: _Expr | None = None

    def render(self) -> str:
        if self.op is None:
            return fmt_number(self.value)
        assert self.left is not None and self.right is not None
        left, right = self.left.render(), self.right.render()
        if self.left.op and _PREC[self.left.op] < _PREC[self.op]:
            left = f"({left})"
        # Equal precedence on the right also gets parentheses, so that left-to-right reading of
        # the text evaluates in exactly the order of the worked steps.
        if self.right.op and _PREC[self.right.op] <= _PREC[self.op]:
            right = f"({right})"
        return f"{left} {_SYM[self.op]} {right}"

    def nodes(self) -> Iterator[_Expr]:
        """Post-order: children before parents, i.e. the order of evaluation."""
        if self.left is not None and self.right is not None:
            yield from self.left.nodes()
            yield from self.right.nodes()
        yield self

    def steps(self) -> list[str]:
        return [_step(n) for n in self.nodes() if n.op is not None]


def _step(node: _Expr) -> str:
    assert node.op is not None and node.left is not None and node.right is not None
    a, b, op = node.left.value, node.right.value, node.op
    head = f"{fmt_operand(a)} {_SYM[op]} {fmt_operand(b)}"
    if a.denominator == 1 and b.denominator == 1:
        return f"{head} = {fmt_number(node.value)}"
    parts = [head]
    if op in "+-":
        den = math.lcm(a.denominator, b.denominator)
        na, nb = a.numerator * den // a.denominator, b.numerator * den // b.denominator
        parts.append(f"{fmt_raw_fraction(na, den)} {op} {fmt_raw_fraction(nb, den)}")
        parts.append(fmt_raw_fraction(na + nb if op == "+" else na - nb, den))
    elif op == "*":
        parts.append(fmt_raw_fraction(a.numerator * b.numerator, a.denominator * b.denominator))
    else:
        parts.append(f"{fmt_operand(a)} \\times {fmt_operand(1 / b)}")
        parts.append(fmt_raw_fraction(a.numerator * b.denominator, a.denominator * b.numerator))
    parts.append(fmt_number(node.value))
    # Drop repeated forms (e.g. a fraction already in lowest terms).
    kept = [p for i, p in enumerate(parts) if i == 0 or p != parts[i - 1]]
    return " = ".join(kept)


def random_expression(
    rng: random.Random, n_ops: int, ops: str, leaf: Callable[[], Fraction], *, integer: bool
) -> _Expr:
    """A random tree with ``n_ops`` operators; with ``integer`` every division is exact."""
    if n_ops == 0:
        return _Expr(leaf())
    op = rng.choice(ops)
    k = rng.randint(0, n_ops - 1)
    left = random_expression(rng, k, ops, leaf, integer=integer)
    right = random_expression(rng, n_ops - 1 - k, ops, leaf, integer=integer)
    if op == "/":
        if integer and right.op is None:
            right = _Expr(Fraction(rng.randint(2, 12)))
        if right.value == 0:
            raise RetryDraw
        if integer and (left.value / right.value).denominator != 1:
            if left.op is not None:
                raise RetryDraw
            left = _Expr(right.value * rng.randint(2, 12))
    value = {
        "+": lambda: left.value + right.value,
        "-": lambda: left.value - right.value,
        "*": lambda: left.value * right.value,
        "/": lambda: left.value / right.value,
    }[op]()
    return _Expr(value, op, left, right)
