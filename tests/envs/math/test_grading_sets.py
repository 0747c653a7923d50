"""Chained relations, and intervals / inequalities / set-builder sets compared as sets of reals."""

from __future__ import annotations

import pytest

from marft_envs.math.grading import (
    Chain,
    Scalar,
    SetBuilder,
    check_gold,
    grade_answer,
    parse_answer,
)

CASES = [
    # chains of inequalities: same sides in the same order, either direction
    ("f(2) < f(1) < f(4)", "f(2) < f(1) < f(4)", True),
    ("f(4) > f(1) > f(2)", "f(2) < f(1) < f(4)", True),
    ("f(1) < f(2) < f(4)", "f(2) < f(1) < f(4)", False),
    ("f(2) \\le f(1) < f(4)", "f(2) < f(1) < f(4)", False),
    ("f(2) < f(1)", "f(2) < f(1) < f(4)", False),
    ("a < b > c", "a < b < c", False),
    # chains of equalities: the last side is the answer
    ("a = b = 5", "5", True),
    ("5", "a = b = 5", True),
    ("a = b = 6", "5", False),
    ("x = 2\\cdot 3 = 6", "6", True),
    ("2 + 3 = 5", "5", True),
    ("x = 5 = 6", "6", False),
    ("3.14159265358979 = \\pi", "\\pi", False),
    ("\\frac{\\pi}{2} = \\frac{2\\pi}{4}", "\\frac{\\pi}{2}", True),
    ("5 = 6", "6", False),
    ("a = 3 < 5", "5", False),
    # set-builder, interval and inequality forms of one set
    ("[-2, 1)", "\\{x|-2\\leq x<1\\}", True),
    ("-2 \\le x < 1", "\\{x|-2\\leq x<1\\}", True),
    ("1 > x \\ge -2", "\\{x \\mid -2\\leq x<1\\}", True),
    ("\\{x : -2 \\le x < 1\\}", "[-2, 1)", True),
    ("[-2, 1]", "\\{x|-2\\leq x<1\\}", False),
    ("(-2, 1)", "\\{x|-2\\leq x<1\\}", False),
    ("-2 \\le y < 1", "\\{x|-2\\leq x<1\\}", False),
    ("(-\\infty, 3)", "x < 3", True),
    ("x < 3", "(-\\infty, 3)", True),
    ("(-\\infty, 3]", "x < 3", False),
    ("(3, \\infty)", "x < 3", False),
    ("\\{x \\mid x > 2\\}", "(2, \\infty)", True),
    ("\\{x \\in \\mathbb{R} \\mid x \\ge 0\\}", "[0, \\infty)", True),
    ("x \\in [0, 1]", "\\{x \\mid 0 \\le x \\le 1\\}", True),
    ("1 < x < 2", "(1, 2)", True),
    ("(-\\infty, 1) \\cup (1, \\infty)", "(-\\infty, 1) \\cup (1, \\infty)", True),
    ("(-\\infty, 1] \\cup [2, \\infty)", "(-\\infty, 1] \\cup [2, \\infty)", True),
    # never intervals: two tuples, a point and a set of two numbers
    ("(2, 1)", "(1, 2)", False),
    ("\\{1, 2\\}", "[1, 2]", False),
    ("x < 3", "y < 3", False),
]


@pytest.mark.parametrize(
    ("answer", "gold", "expected"), CASES, ids=[f"{a} vs {g}" for a, g, _ in CASES]
)
def test_chains_and_sets(answer: str, gold: str, expected: bool) -> None:
    assert grade_answer(f"\\boxed{{{answer}}}", gold) is expected


@pytest.mark.parametrize(
    "gold", ["\\{x|-2\\leq x<1\\}", "f(2) < f(1) < f(4)", "a = b = 5", "\\{x \\mid x > 0\\}"]
)
def test_golds_of_real_files_are_readable(gold: str) -> None:
    check_gold(gold)


def test_structures() -> None:
    chain = parse_answer("c > b \\ge a")
    assert isinstance(chain, Chain) and [str(s) for s in chain.sides] == ["a", "b", "c"]
    assert chain.strict == (False, True)
    builder = parse_answer("\\{x \\mid x < 3\\}")
    assert isinstance(builder, SetBuilder) and str(builder.variable) == "x"
    assert isinstance(parse_answer("2 \\cdot 3 = 6"), Scalar)


@pytest.mark.parametrize("text", ["a < b > c", "x = 5 = 6 = 7 = y", "3 = x < 5", "x \\ne 2 < 3"])
def test_unsupported_chains_are_parse_errors(text: str) -> None:
    with pytest.raises(ValueError):
        parse_answer(text)
