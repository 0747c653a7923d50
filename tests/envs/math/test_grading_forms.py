"""Tests for marft_envs.math.grading.forms: the edge forms of a number, rule by rule (the labelled
``edge_forms`` cases in tests/data/grading_cases.jsonl grade them end to end)."""

from __future__ import annotations

import pytest

from marft_envs.math.grading import grade_answer, normalize_answer
from marft_envs.math.grading.forms import spelled_number, tex_over, vulgar_fractions


@pytest.mark.parametrize(
    ("words", "value"),
    [
        ("five", 5),
        ("twenty-one", 21),
        ("one hundred and twenty-five", 125),
        ("two thousand and seven", 2007),
        ("one million two hundred thousand", 1_200_000),
        ("minus three", -3),
        ("five six", None),
        ("twenty thirty", None),
        ("thousand", None),
        ("one thousand one million", None),
        ("apples", None),
    ],
)
def test_spelled_number(words: str, value: int | None) -> None:
    assert spelled_number(words) == value


def test_every_vulgar_fraction_is_its_value() -> None:
    for char, (numerator, denominator) in {"½": (1, 2), "⅔": (2, 3), "⅒": (1, 10)}.items():
        assert vulgar_fractions(char) == f"\\frac{{{numerator}}}{{{denominator}}}"
    assert vulgar_fractions("x^½") == "x^{\\frac{1}{2}}"
    assert vulgar_fractions("3½") == "(3+\\frac{1}{2})"


def test_over_splits_the_group_that_holds_it() -> None:
    assert tex_over("{1 \\over 2}") == "{\\frac{1}{2}}"
    assert tex_over("1 \\over 2") == "\\frac{1}{2}"
    assert tex_over("\\frac{1 \\over 2}{3}") == "\\frac{\\frac{1}{2}}{3}"
    assert tex_over("{n \\choose k}") == "{\\binom{n}{k}}"
    assert tex_over("\\overline{3}") == "\\overline{3}"
    # Two in one group is an error in TeX: left as written.
    assert tex_over("{1 \\over 2 \\over 3}") == "{1 \\over 2 \\over 3}"


@pytest.mark.parametrize(
    ("answer", "normalised"),
    [
        ("1 000", "1000"),
        ("1\u2009000\u2009000", "1000000"),
        ("1'000", "1000"),
        ("(1 000, 2)", "(1000, 2)"),
        # Only when every group after the first has three digits.
        ("1 000 0000", "1 000 0000"),
        ("12 1 000", "12 1 000"),
        ("1'00", "1'00"),
    ],
)
def test_digit_groups(answer: str, normalised: str) -> None:
    assert normalize_answer(answer) == normalised


@pytest.mark.parametrize(
    ("answer", "gold", "paid"),
    [
        ("5 (five)", "5", True),
        ("5 (six)", "5", False),
        ("5 (six)", "6", False),
        ("five (5)", "5", True),
        ("six (5)", "5", False),
        ("{1 \\over 2}", "0.5", True),
        ("{1 \\over 2}", "2", False),
        ("½", "0.5", True),
        ("½", "0.25", False),
        ("1'000", "1000", True),
        ("1'000", "100", False),
        ("3.9\\times 10^{2}", "390", True),
        ("3.9\\times 10^{2}", "39", False),
        ("3.9·10^3", "3900", True),
    ],
)
def test_edge_forms_are_paid_only_when_right(answer: str, gold: str, paid: bool) -> None:
    assert grade_answer(f"The answer is $\\boxed{{{answer}}}$.", gold) is paid


def test_answer_wrappers_drop_only_the_announcement_and_the_bold() -> None:
    from marft_envs.math.grading.forms import answer_wrappers

    assert answer_wrappers("Answer: 5") == "5"
    assert answer_wrappers("Final answer: 42") == "42"
    assert answer_wrappers("The final answer is \\frac12") == "\\frac12"
    assert answer_wrappers("\\text{The answer is } 5") == "5"
    assert answer_wrappers("**5**") == "5"
    assert answer_wrappers("**Answer: 5**") == "5"
    # Alone, in another word, or with other words first: left as written.
    assert answer_wrappers("Answer:") == "Answer:"
    assert answer_wrappers("answers: 5") == "answers: 5"
    assert answer_wrappers("\\text{The answer is not } 3") == "\\text{The answer is not } 3"
    assert answer_wrappers("2**3") == "2**3"


@pytest.mark.parametrize(
    ("answer", "normalised"),
    [
        ("1 1/2", "(1+\\frac{1}{2})"),
        ("-2 3/4", "-(2+\\frac{3}{4})"),
        ("1 3/2", "1 3/2"),  # not a proper fraction: not a mixed number
        ("1 000.5", "1000.5"),
        ("twenty-one", "21"),
        ("one hundred and five", "105"),
    ],
)
def test_slash_mixed_numbers_grouped_decimals_and_compound_words(
    answer: str, normalised: str
) -> None:
    assert normalize_answer(answer) == normalised


@pytest.mark.parametrize(
    ("response", "gold", "paid"),
    [
        ("\\boxed{1 1/2}", "\\frac{3}{2}", True),
        ("\\boxed{1 1/2}", "\\frac{1}{2}", False),
        ("\\boxed{1 000.5}", "1000.5", True),
        ("\\boxed{1 000.5}", "1000", False),
        ("\\boxed{twenty-one}", "21", True),
        ("\\boxed{twenty-one}", "20", False),
        ("Answer: 5", "5", True),
        ("Answer: 5", "6", False),
        ("Answer: not 5", "5", False),
        ("**12**", "12", True),
        ("The answer is **12**.", "12", False),  # prose without a box has no answer
    ],
)
def test_edge_forms_of_math_v7(response: str, gold: str, paid: bool) -> None:
    assert grade_answer(response, gold) is paid
