"""The problem families of the built-in generator: what each draws, at each level.

Every family is a function ``make(rng, level) -> (problem, answer, steps)`` that draws only from
``rng``, computes its answer exactly (:class:`fractions.Fraction`, never floats) and writes it the
way the MATH benchmark writes answers; it raises :class:`RetryDraw` when the numbers it drew give
a degenerate problem. :mod:`marft_envs.math.generator` turns a mix of families into a dataset.

| family | like MATH's | level 1 → level 5 |
|---|---|---|
| ``arithmetic`` | Prealgebra | 2 operations on small numbers → 5 operations with parentheses |
| ``fractions`` | Prealgebra | same-denominator sums → three-term expressions with ÷ |
| ``powers`` | Prealgebra | squares and square roots → fractional and negative exponents |
| ``percent`` | Prealgebra | easy percentages → successive changes and reverse percentages |
| ``linear`` | Algebra | ``x + a = b`` → equations with fractions, fractional answers |
| ``system`` | Algebra | ``x + y = s, x - y = d`` → 2×2 systems with fractional solutions |
| ``word`` | Prealgebra | one-step stories → four-step stories |
| ``quadratic`` | Algebra | ``x^2 = k`` → non-monic quadratics with rational roots |
| ``digits`` (opt-in) | — | ``5 + 3`` → five single-digit operations; sized for tiny CPU models |
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from fractions import Fraction

from marft_envs.math.expressions import (
    RetryDraw,
    fmt_decimal,
    fmt_linear,
    fmt_linear2,
    fmt_number,
    fmt_operand,
    fmt_quadratic,
    fmt_raw_fraction,
    random_expression,
)

__all__ = ["FAMILIES", "LEVELS", "OPT_IN_FAMILIES", "Draft", "Family", "RetryDraw", "family"]

LEVELS: tuple[int, ...] = (1, 2, 3, 4, 5)
"""The difficulty levels every family supports (1 easiest), as in the MATH benchmark."""

# What a family returns: problem text, answer, and the worked steps (without the final \boxed{}).
Draft = tuple[str, str, list[str]]


@dataclass(frozen=True)
class Family:
    """One kind of generated problem.

    Attributes:
        name: Registry key, also used as the problem's ``subject``.
        description: One line for docs and ``repr``.
        make: ``make(rng, level) -> (problem, answer, steps)``: the problem text, its exact answer
            in LaTeX, and the worked steps without the final ``\\boxed{}``. It draws only from
            ``rng`` and may raise :class:`RetryDraw` to ask for a fresh draw.
    """

    name: str
    description: str
    make: Callable[[random.Random, int], Draft]


# --- arithmetic and fractions: random expression trees ---------------------------------------


# (operations, largest leaf, operators, parentheses allowed, largest |intermediate|)
_ARITH_LEVELS = {
    1: (2, 20, "+-*", False, 500),
    2: (2, 30, "+-*/", False, 1000),
    3: (3, 40, "+-*/", True, 2000),
    4: (4, 60, "+-*/", True, 5000),
    5: (5, 99, "+-*/", True, 20000),
}


def _arithmetic(rng: random.Random, level: int) -> Draft:
    n_ops, top, ops, parens, limit = _ARITH_LEVELS[level]

    def leaf() -> Fraction:
        return Fraction(rng.randint(2 if level > 1 else 1, top))

    expr = random_expression(rng, n_ops, ops, leaf, integer=True)
    text = expr.render()
    if not parens and "(" in text:
        raise RetryDraw
    values = [node.value for node in expr.nodes()]
    if max(abs(v) for v in values) > limit or (level <= 2 and min(values) < 0):
        raise RetryDraw
    steps = expr.steps()
    return f"Compute {text}.", fmt_number(expr.value), steps


_FRACTION_LEVELS = {
    # (operations, largest denominator, operators)
    1: (1, 20, "+"),
    2: (1, 12, "+-"),
    3: (1, 12, "*/"),
    4: (2, 12, "+-*"),
    5: (2, 20, "+-*/"),
}


def _fractions(rng: random.Random, level: int) -> Draft:
    n_ops, top, ops = _FRACTION_LEVELS[level]
    common = rng.randint(3, top)

    def leaf() -> Fraction:
        den = common if level == 1 else rng.randint(2, top)
        num = rng.randint(1, den - 1 if level <= 2 else 2 * den)
        value = Fraction(num, den)
        # Level 1 shows one common denominator, so only fractions already in lowest terms qualify.
        if value.denominator == 1 or (level == 1 and value.denominator != common):
            raise RetryDraw
        return value

    expr = random_expression(rng, n_ops, ops, leaf, integer=False)
    values = [node.value for node in expr.nodes()]
    if (level <= 2 and expr.value < 0) or max(v.denominator for v in values) > 400:
        raise RetryDraw
    return f"Compute {expr.render()}.", fmt_number(expr.value), expr.steps()


# --- powers and roots -------------------------------------------------------------------------


def _powers(rng: random.Random, level: int) -> Draft:
    if level == 1:
        kind, a, b = rng.randrange(4), rng.randint(2, 30), rng.randint(2, 12)
        if kind == 0:
            return f"Compute {a}^2.", str(a * a), [f"{a}^2 = {a} \\times {a} = {a * a}"]
        if kind == 1:
            return (
                f"Compute \\sqrt{{{a * a}}}.",
                str(a),
                [f"{a}^2 = {a * a}, so \\sqrt{{{a * a}}} = {a}"],
            )
        if kind == 2:
            a = a % 9 + 2
            return f"Compute {a}^3.", str(a**3), [f"{a}^3 = {a} \\times {a} \\times {a} = {a**3}"]
        a = a % 11 + 2
        steps = [f"{a}^2 = {a * a}", f"{b}^2 = {b * b}", f"{a * a} + {b * b} = {a * a + b * b}"]
        return f"Compute {a}^2 + {b}^2.", str(a * a + b * b), steps
    if level == 2:
        a, m = rng.randint(2, 5), rng.randint(3, 5)
        b, n = rng.randint(2, 5), rng.randint(2, 4)
        sign = rng.choice("+-")
        pa, pb = a**m, b**n
        value = pa + pb if sign == "+" else pa - pb
        steps = [f"{a}^{m} = {pa}", f"{b}^{n} = {pb}", f"{pa} {sign} {pb} = {value}"]
        return f"Compute {a}^{m} {sign} {b}^{n}.", str(value), steps
    if level == 3:
        a = rng.randint(2, 5)
        m = rng.randint(5, 12)
        n = rng.randint(2, m - 1)
        if a**m > 10**5:
            raise RetryDraw
        if rng.random() < 0.5:
            k = m - n
            steps = [
                f"{a}^{{{m}}} \\div {a}^{{{n}}} = {a}^{{{m} - {n}}} = {a}^{{{k}}}",
                f"{a}^{{{k}}} = {a**k}",
            ]
            return f"Compute {a}^{{{m}}} \\div {a}^{{{n}}}.", str(a**k), steps
        p, q = rng.randint(2, 6), rng.randint(2, 6)
        k = p + q
        if a**k > 10**5:
            raise RetryDraw
        steps = [
            f"{a}^{{{p}}} \\times {a}^{{{q}}} = {a}^{{{p} + {q}}} = {a}^{{{k}}}",
            f"{a}^{{{k}}} = {a**k}",
        ]
        return f"Compute {a}^{{{p}}} \\times {a}^{{{q}}}.", str(a**k), steps
    if level == 4:
        outer, inner = (
            rng.randint(2, 15),
            rng.choice([2, 3, 5, 6, 7, 10, 11, 13, 14, 15, 17, 19, 21, 22]),
        )
        n = outer * outer * inner
        answer = f"{outer}\\sqrt{{{inner}}}"
        steps = [
            f"{n} = {outer * outer} \\times {inner}",
            f"\\sqrt{{{n}}} = \\sqrt{{{outer * outer}}} \\times \\sqrt{{{inner}}} = {answer}",
        ]
        return f"Simplify \\sqrt{{{n}}}.", answer, steps
    # level 5: rational exponents, possibly negative, of a perfect q-th power (maybe a fraction)
    q = rng.choice([2, 3, 4])
    top = {2: 12, 3: 5, 4: 3}[q]
    root = Fraction(rng.randint(2, top))
    if rng.random() < 0.4:
        root = Fraction(rng.randint(1, top), rng.randint(2, top))
        if root.denominator == 1 or (root.numerator == 1 and q == 2):
            raise RetryDraw
    p = rng.choice([k for k in range(1, 5) if math.gcd(k, q) == 1])
    power_sign = rng.choice([1, -1])
    base = root**q
    base_text = fmt_number(base) if base.denominator == 1 else f"({fmt_number(base)})"
    exponent = f"{'-' if power_sign < 0 else ''}{p}/{q}"
    value = root ** (p * power_sign)
    root_text = f"\\sqrt{{{fmt_number(base)}}}" if q == 2 else f"\\sqrt[{q}]{{{fmt_number(base)}}}"
    steps = [f"{root_text} = {fmt_number(root)}"]
    if p > 1:
        steps.append(
            f"{fmt_number(root) if root.denominator == 1 else f'({fmt_number(root)})'}^{p} = {fmt_number(root**p)}"
        )
    if power_sign < 0:
        steps.append(
            f"{base_text}^{{{exponent}}} = 1 \\div {fmt_number(root**p)} = {fmt_number(value)}"
        )
    return f"Compute {base_text}^{{{exponent}}}.", fmt_number(value), steps


# --- percentages -------------------------------------------------------------------------------


def _percent(rng: random.Random, level: int) -> Draft:
    if level <= 2:
        p = rng.choice([10, 20, 25, 50, 75]) if level == 1 else rng.randint(2, 95)
        unit = 100 // math.gcd(p, 100)
        n = unit * rng.randint(1, 400 // unit if level == 1 else 2000 // unit)
        value = Fraction(p * n, 100)
        steps = [
            f"{p}\\% = \\frac{{{p}}}{{100}}",
            f"\\frac{{{p}}}{{100}} \\times {n} = {fmt_number(value)}",
        ]
        return f"What is {p}\\% of {n}?", fmt_number(value), steps
    if level == 3:
        whole = rng.choice([20, 25, 40, 50, 80, 120, 150, 200, 250, 400, 500])
        p = rng.randint(1, 99)
        part = Fraction(p * whole, 100)
        if part.denominator != 1:
            raise RetryDraw
        if rng.random() < 0.5:
            steps = [
                f"\\frac{{{part}}}{{{whole}}} = {fmt_number(Fraction(p, 100))}",
                f"{fmt_number(Fraction(p, 100))} = {p}\\%",
            ]
            return f"What percent of {whole} is {part}?", str(p), steps
        steps = [
            f"{p}\\% of the number is {part}",
            f"The number is {part} \\times \\frac{{100}}{{{p}}} = {whole}",
        ]
        return f"{part} is {p}\\% of what number?", str(whole), steps
    if level == 4:
        price = rng.randint(2, 40) * 10
        up, down = (
            rng.choice([5, 10, 15, 20, 25, 30, 40, 50]),
            rng.choice([5, 10, 15, 20, 25, 30, 40, 50]),
        )
        mid = Fraction(price) * (100 + up) / 100
        final = mid * (100 - down) / 100
        if final.denominator not in (1, 2, 4, 5, 10, 20, 25, 50, 100):
            raise RetryDraw
        steps = [
            f"{price} \\times {fmt_decimal(Fraction(100 + up, 100))} = {fmt_decimal(mid)}",
            f"{fmt_decimal(mid)} \\times {fmt_decimal(Fraction(100 - down, 100))} = {fmt_decimal(final)}",
        ]
        text = (
            f"A price of {price} rises by {up}\\%, then falls by {down}\\%. What is the new price?"
        )
        return text, fmt_decimal(final), steps
    # level 5: reverse percentage or percent change
    if rng.random() < 0.5:
        p = rng.choice([5, 10, 12, 15, 20, 25, 30, 35, 40, 60])
        original = rng.randint(2, 60) * 20
        after = Fraction(original * (100 - p), 100)
        if after.denominator != 1:
            raise RetryDraw
        steps = [
            f"{after} is {100 - p}\\% of the original price",
            f"{after} \\times \\frac{{100}}{{{100 - p}}} = {original}",
        ]
        return (
            f"After a {p}\\% discount, a coat costs {after}. What was the original price?",
            str(original),
            steps,
        )
    # old a multiple of 20 and change a multiple of 5 keep the new value whole
    old, change = rng.randint(1, 25) * 20, rng.choice([c for c in range(-60, 155, 5) if c])
    new = old * (100 + change) // 100
    word = "increase" if change > 0 else "decrease"
    high, low = max(new, old), min(new, old)
    steps = [
        f"{high} - {low} = {high - low}",
        f"\\frac{{{high - low}}}{{{old}}} \\times 100 = {abs(change)}",
    ]
    return f"A value goes from {old} to {new}. What is the percent {word}?", str(abs(change)), steps


# --- linear equations and systems -------------------------------------------------------------


def _linear(rng: random.Random, level: int) -> Draft:
    x: int | Fraction  # whole at the lower levels, rational at the top
    if level == 1:
        x, a = rng.randint(-5, 30), rng.randint(1, 30)
        b = x + a
        return f"Solve for x: x + {a} = {b}.", str(x), [f"x = {b} - {a} = {x}"]
    if level == 2:
        x, a, b = rng.randint(-10, 15), rng.randint(2, 9), rng.randint(-20, 20)
        c = a * x + b
        steps = [
            f"{a}x = {c} - {fmt_operand(Fraction(b))} = {c - b}",
            f"x = {fmt_raw_fraction(c - b, a)} = {x}",
        ]
        return f"Solve for x: {fmt_linear(a, b)} = {c}.", str(x), steps
    if level == 3:
        x, a, c = rng.randint(-12, 12), rng.randint(2, 12), rng.randint(1, 11)
        if a == c:
            raise RetryDraw
        b = rng.randint(-30, 30)
        d = a * x + b - c * x
        steps = [
            f"{a}x - {c}x = {d} - {fmt_operand(Fraction(b))}",
            f"{fmt_linear(a - c, 0)} = {d - b}",
            f"x = {x}",
        ]
        return f"Solve for x: {fmt_linear(a, b)} = {fmt_linear(c, d)}.", str(x), steps
    if level == 4:
        # k(x + m) = c x + d, any rational solution
        k, m = rng.choice([2, 3, 4, 5, 6, -2, -3]), rng.randint(-9, 9)
        c, d = rng.randint(-7, 9), rng.randint(-30, 30)
        if k == c or m == 0:
            raise RetryDraw
        x = Fraction(d - k * m, k - c)
        left = f"{k}({fmt_linear(1, m)})"
        steps = [
            f"{fmt_linear(k, k * m)} = {fmt_linear(c, d)}",
            f"{fmt_linear(k - c, 0)} = {d - k * m}",
            f"x = {fmt_number(x)}",
        ]
        return f"Solve for x: {left} = {fmt_linear(c, d)}.", fmt_number(x), steps
    # level 5: (a x + b)/p = (c x + d)/q, cross-multiplied
    p, q = rng.randint(2, 7), rng.randint(2, 7)
    a, c = rng.randint(1, 5), rng.randint(1, 5)
    b, d = rng.randint(-9, 9), rng.randint(-9, 9)
    if p == q or q * a == p * c:
        raise RetryDraw
    x = Fraction(p * d - q * b, q * a - p * c)
    steps = [
        f"{q}({fmt_linear(a, b)}) = {p}({fmt_linear(c, d)})",
        f"{fmt_linear(q * a, q * b)} = {fmt_linear(p * c, p * d)}",
        f"{fmt_linear(q * a - p * c, 0)} = {p * d - q * b}",
        f"x = {fmt_number(x)}",
    ]
    return (
        f"Solve for x: \\frac{{{fmt_linear(a, b)}}}{{{p}}} = \\frac{{{fmt_linear(c, d)}}}{{{q}}}.",
        fmt_number(x),
        steps,
    )


def _pair(x: Fraction, y: Fraction) -> str:
    return f"({fmt_number(x)},{fmt_number(y)})"


def _system(rng: random.Random, level: int) -> Draft:
    x: int | Fraction
    y: int | Fraction
    c1: int | Fraction
    c2: int | Fraction
    if level == 1:
        x, y = rng.randint(1, 20), rng.randint(1, 20)
        s, d = x + y, x - y
        steps = [f"Adding: 2x = {s + d}, so x = {x}", f"y = {s} - {x} = {y}"]
        return (
            f"Solve for (x, y): x + y = {s}, x - y = {d}.",
            _pair(Fraction(x), Fraction(y)),
            steps,
        )
    if level == 2:
        x, y, a = rng.randint(-10, 15), rng.randint(-10, 15), rng.randint(2, 6)
        s, t = x + y, a * x + y
        steps = [
            f"Subtracting: {fmt_linear(a - 1, 0)} = {t - s}, so x = {x}",
            f"y = {s} - {fmt_operand(Fraction(x))} = {y}",
        ]
        text = f"Solve for (x, y): x + y = {s}, {fmt_linear2(a, 1, t)}."
        return text, _pair(Fraction(x), Fraction(y)), steps
    lo, hi = {3: (1, 6), 4: (-9, 9), 5: (-9, 9)}[level]
    a1, b1, a2, b2 = (rng.randint(lo, hi) for _ in range(4))
    det = a1 * b2 - a2 * b1
    if det == 0 or 0 in (a1, b1, a2, b2):
        raise RetryDraw
    if level < 5:
        x, y = Fraction(rng.randint(-12, 12)), Fraction(rng.randint(-12, 12))
        c1, c2 = a1 * x + b1 * y, a2 * x + b2 * y
    else:
        c1, c2 = rng.randint(-20, 20), rng.randint(-20, 20)
        x = Fraction(c1 * b2 - c2 * b1, det)
        y = Fraction(a1 * c2 - a2 * c1, det)
        if (x.denominator == 1 and y.denominator == 1) or max(x.denominator, y.denominator) > 30:
            raise RetryDraw
    steps = [
        f"Eliminate y: ({a1} \\times {fmt_operand(Fraction(b2))} - {fmt_operand(Fraction(a2))} \\times {fmt_operand(Fraction(b1))})x"
        f" = {fmt_operand(c1)} \\times {fmt_operand(Fraction(b2))} - {fmt_operand(c2)} \\times {fmt_operand(Fraction(b1))}",
        f"{det}x = {fmt_number(c1 * b2 - c2 * b1)}, so x = {fmt_number(x)}",
        f"y = \\frac{{{fmt_number(c1)} - {fmt_operand(Fraction(a1))} \\times {fmt_operand(x)}}}{{{b1}}} = {fmt_number(y)}",
    ]
    text = f"Solve for (x, y): {fmt_linear2(a1, b1, c1)}, {fmt_linear2(a2, b2, c2)}."
    return text, _pair(x, y), steps


# --- quadratics ----------------------------------------------------------------------------------


def _roots_answer(roots: Iterable[Fraction]) -> str:
    return ", ".join(fmt_number(r) for r in sorted(set(roots)))


def _factor(p: int, root_num: int) -> str:
    """The linear factor ``p x - root_num``, as ``(x - 2)``, ``(2x + 1)`` or ``x``."""
    return "x" if root_num == 0 and p == 1 else f"({fmt_linear(p, -root_num)})"


def _quadratic(rng: random.Random, level: int) -> Draft:
    roots: list[int] | list[Fraction]
    if level == 1:
        k, c = rng.randint(1, 30), rng.randint(0, 30)
        steps = [f"x = \\pm\\sqrt{{{k * k}}} = \\pm {k}"]
        if c:
            steps.insert(0, f"x^2 = {k * k + c} - {c} = {k * k}")
        return f"Find all x with x^2{f' + {c}' if c else ''} = {k * k + c}.", f"-{k}, {k}", steps
    if level == 2 and rng.random() < 0.5:
        r, s = sorted(
            (rng.randint(-15, 15), rng.randint(-15, 15)), key=lambda v: v != 0
        )  # "x(x - 4)"
        steps = [
            f"{fmt_linear(1, -r)} = 0 or {fmt_linear(1, -s)} = 0",
            f"x = {r}" + ("" if r == s else f" or x = {s}"),
        ]
        return (
            f"Find all roots of {_factor(1, r)}{_factor(1, s)} = 0.",
            _roots_answer([Fraction(r), Fraction(s)]),
            steps,
        )
    if level == 2:
        r = rng.choice([k for k in range(-15, 16) if k != 0])
        steps = [f"x{_factor(1, r)} = 0", f"x = 0 or x = {r}"]
        return (
            f"Find all roots of {fmt_quadratic(1, -r, 0)} = 0.",
            _roots_answer([Fraction(0), Fraction(r)]),
            steps,
        )
    if level in (3, 4):
        lo, hi = (1, 20) if level == 3 else (-12, 12)
        r, s = rng.randint(lo, hi), rng.randint(lo, hi)
        if 0 in (r, s):
            raise RetryDraw
        roots = sorted((r, s))
        steps = [
            f"Two numbers with sum {r + s} and product {r * s}: {roots[0]} and {roots[1]}",
            f"{_factor(1, roots[0])}{_factor(1, roots[1])} = 0",
            f"x = {roots[0]}" + ("" if r == s else f" or x = {roots[1]}"),
        ]
        text = f"Find all roots of {fmt_quadratic(1, -(r + s), r * s)} = 0."
        return text, _roots_answer([Fraction(r), Fraction(s)]), steps
    # level 5: (p x - q)(m x - n) with rational roots q/p and n/m
    p, m = rng.randint(2, 5), rng.randint(1, 3)
    q, n = (
        rng.choice([k for k in range(-9, 10) if k != 0]),
        rng.choice([k for k in range(-9, 10) if k != 0]),
    )
    if math.gcd(p, q) != 1 or math.gcd(m, n) != 1:
        raise RetryDraw
    a, b, c = p * m, -(p * n + q * m), q * n
    roots = sorted({Fraction(q, p), Fraction(n, m)})
    steps = [
        f"{fmt_quadratic(a, b, c)} = {_factor(p, q)}{_factor(m, n)}",
        " or ".join(f"x = {fmt_number(r)}" for r in roots),
    ]
    return f"Find all roots of {fmt_quadratic(a, b, c)} = 0.", _roots_answer(roots), steps


# --- word problems ------------------------------------------------------------------------------

_NAMES = ("Ava", "Ben", "Cleo", "Dan", "Eli", "Fay", "Gus", "Hana", "Ivan", "Jo", "Kai", "Lea")
_ITEMS = ("apples", "pens", "books", "stickers", "marbles", "cards", "shells", "coins")


def _word(rng: random.Random, level: int) -> Draft:
    spent: int | Fraction
    name, item = rng.choice(_NAMES), rng.choice(_ITEMS)
    variant = rng.random() < 0.5
    if level == 1:
        a = rng.randint(5, 60)
        b = rng.randint(2, 40) if variant else rng.randint(1, a - 1)
        if variant:
            text = f"{name} has {a} {item} and gets {b} more. How many {item} does {name} have?"
            return text, str(a + b), [f"{a} + {b} = {a + b}"]
        text = f"{name} has {a} {item} and gives away {b}. How many {item} are left?"
        return text, str(a - b), [f"{a} - {b} = {a - b}"]
    if level == 2:
        k, m = rng.randint(2, 12), rng.randint(3, 15)
        if variant:
            g = rng.randint(1, k * m - 1)
            text = (
                f"{name} buys {k} boxes of {m} {item} and gives away {g}. How many {item} are left?"
            )
            return (
                text,
                str(k * m - g),
                [f"{k} \\times {m} = {k * m}", f"{k * m} - {g} = {k * m - g}"],
            )
        total = k * m + rng.randint(0, 40)
        text = f"{name} has {total} {item} and shares {k * m} equally among {k} friends. How many {item} does each friend get?"
        return text, str(m), [f"{k * m} \\div {k} = {m}"]
    if level == 3:
        p, q, a, c = rng.randint(5, 30), rng.randint(2, 20), rng.randint(2, 9), rng.randint(2, 9)
        if variant:
            text = f"Adult tickets cost {p} dollars and child tickets {q} dollars. What do {a} adults and {c} children pay?"
            steps = [
                f"{a} \\times {p} = {a * p}",
                f"{c} \\times {q} = {c * q}",
                f"{a * p} + {c * q} = {a * p + c * q}",
            ]
            return text, str(a * p + c * q), steps
        h, spent = rng.randint(2, 12), rng.randint(1, p * a)
        text = f"{name} earns {p} dollars an hour for {h} hours, then spends {spent} dollars. How many dollars are left?"
        if spent >= p * h:
            raise RetryDraw
        return (
            text,
            str(p * h - spent),
            [f"{p} \\times {h} = {p * h}", f"{p * h} - {spent} = {p * h - spent}"],
        )
    if level == 4:
        v1, t1, v2, t2 = (
            rng.randint(3, 12) * 5,
            rng.randint(2, 5),
            rng.randint(3, 12) * 5,
            rng.randint(2, 5),
        )
        d1, d2 = v1 * t1, v2 * t2
        if (d1 + d2) % (t1 + t2) or v1 == v2:
            raise RetryDraw
        text = f"A car drives {v1} km/h for {t1} hours, then {v2} km/h for {t2} hours. What is its average speed in km/h?"
        steps = [
            f"{v1} \\times {t1} = {d1}",
            f"{v2} \\times {t2} = {d2}",
            f"{d1} + {d2} = {d1 + d2} km in {t1} + {t2} = {t1 + t2} hours",
            f"{d1 + d2} \\div {t1 + t2} = {(d1 + d2) // (t1 + t2)}",
        ]
        return text, str((d1 + d2) // (t1 + t2)), steps
    # level 5: four steps with a fraction or a percentage
    if variant:
        trays, per = rng.randint(2, 12), rng.choice([12, 20, 24, 30, 36, 40, 60])
        num, den = rng.choice([(1, 2), (1, 3), (2, 3), (1, 4), (3, 4), (2, 5), (3, 5)])
        total = trays * per
        sold = total * num // den
        rest = total - sold
        bags = [b for b in range(3, 11) if rest % b == 0]
        if total % den or not bags:
            raise RetryDraw
        bag = rng.choice(bags)
        text = (
            f"A baker makes {trays} trays of {per} cookies, sells \\frac{{{num}}}{{{den}}} of them and packs "
            f"the rest in bags of {bag}. How many bags are filled?"
        )
        steps = [
            f"{trays} \\times {per} = {total}",
            f"\\frac{{{num}}}{{{den}}} \\times {total} = {sold}",
            f"{total} - {sold} = {rest}",
            f"{rest} \\div {bag} = {rest // bag}",
        ]
        return text, str(rest // bag), steps
    save, weeks, pct = (
        rng.randint(2, 30) * 5,
        rng.randint(3, 20),
        rng.choice([10, 20, 25, 30, 40, 50, 60, 75]),
    )
    total = save * weeks
    spent = Fraction(total * pct, 100)
    if spent.denominator != 1:
        raise RetryDraw
    text = f"{name} saves {save} dollars a week for {weeks} weeks, then spends {pct}\\% of it. How many dollars are left?"
    steps = [
        f"{save} \\times {weeks} = {total}",
        f"{pct}\\% of {total} is {spent}",
        f"{total} - {spent} = {total - spent}",
    ]
    return text, str(total - spent), steps


def _digits(rng: random.Random, level: int) -> Draft:
    """Single-digit operands, ``level`` operations, a product first so left to right is correct."""
    steps: list[str] = []
    if rng.random() < 0.5:
        a, b = rng.randint(2, 9), rng.randint(2, 9)
        value, text = a * b, f"{a} \\times {b}"
        steps.append(f"{a} \\times {b} = {value}")
        remaining = level - 1
    else:
        value = rng.randint(2, 9)
        text = str(value)
        remaining = level
    for _ in range(remaining):
        c = rng.randint(1, 9)
        symbol = "+" if rng.random() < 0.5 or value < c else "-"
        new = value + c if symbol == "+" else value - c
        steps.append(f"{value} {symbol} {c} = {new}")
        text += f" {symbol} {c}"
        value = new
    return f"Compute {text}.", str(value), steps


FAMILIES: dict[str, Family] = {
    family.name: family
    for family in (
        Family(
            "arithmetic",
            "integer arithmetic with several operations (order of operations)",
            _arithmetic,
        ),
        Family("fractions", "sums, differences, products and quotients of fractions", _fractions),
        Family("powers", "powers, roots, exponent rules, radicals, rational exponents", _powers),
        Family("percent", "percent of a number, percent change, reverse percentages", _percent),
        Family("linear", "solve a linear equation for x", _linear),
        Family("system", "solve a system of two linear equations", _system),
        Family("word", "short word problems with one to four steps", _word),
        Family("quadratic", "roots of a quadratic with rational roots", _quadratic),
    )
}
"""The registered problem families, by name (see the module table); the built-in splits use these."""

OPT_IN_FAMILIES: dict[str, Family] = {
    "digits": Family(
        "digits",
        "single-digit operands, one operation per level (level 3: 7 \\times 8 + 3 - 5); for tiny models",
        _digits,
    ),
}
"""Families available by name (``families=["digits"]``) but not part of the default mix."""


def family(name: str) -> Family | None:
    """The family registered under ``name`` in :data:`FAMILIES` or :data:`OPT_IN_FAMILIES`."""
    return FAMILIES.get(name, OPT_IN_FAMILIES.get(name))
