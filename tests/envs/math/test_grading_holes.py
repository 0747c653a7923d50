"""Grader holes found by an adversary (issue 27): wrong values paid, right values refused, and
time-outs that misfired under concurrency."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import mpmath
import pytest
import sympy

from marft_envs.math.grading import (
    GradingTimeout,
    grade_answer,
    normalize_answer,
    parse_answer,
    time_limit,
)
from marft_envs.math.grading.numeric import numbers_equal

REPO_ROOT = Path(__file__).resolve().parents[3]


def boxed(answer: str) -> str:
    return f"So the answer is \\boxed{{{answer}}}."


def _pi_digits(n: int) -> str:
    with mpmath.workdps(n + 10):
        return mpmath.nstr(mpmath.pi, n, strip_zeros=False)


# -- wrong values score 0 -----------------------------------------------------------------------

WRONG = [
    ("5_{1000}", "5"),  # no base 1000 numeral: not 5
    ("5_{1}", "5"),
    ("9_8", "9"),  # 9 is no digit in base 8
    ("5 \\text{ ways times ways}", "5"),
    ("5 ways times ways", "5"),
    ("0.\\overline{3}5", "\\frac{5}{3}"),  # digits after the block: not 1/3 times 5
    ("5.\\overline{0}1", "5"),
    ("0.\\overline{3}\\overline{3}", "\\frac{1}{9}"),
    (_pi_digits(200), "\\pi"),  # an approximation is not the number
    (_pi_digits(200) + " = \\pi", "\\pi"),
    (f"{_pi_digits(200)}\\sqrt{{2}}", "\\pi\\sqrt{2}"),
]


@pytest.mark.parametrize(("answer", "gold"), WRONG)
def test_wrong_values_score_zero(answer: str, gold: str) -> None:
    assert grade_answer(boxed(answer), gold) is False


RIGHT = [
    ("52_8", "52"),
    ("1011_{2}", "1011"),
    ("52_{16}", "52"),
    ("0.\\overline{3}", "\\frac{1}{3}"),
    ("0.1\\overline{6}", "\\frac{1}{6}"),
    ("5 \\text{ times}", "5"),
    ("12 apples in total", "12"),
    ("2x cm", "2x"),
    ("\\log_2 8 = 3", "3"),
    ("\\frac{\\sqrt{2}}{2}", "\\frac{1}{\\sqrt{2}}"),
    ("\\sqrt{3+2\\sqrt{2}}", "1+\\sqrt{2}"),
    ("0.5", "\\frac{1}{2}"),
]


@pytest.mark.parametrize(("answer", "gold"), RIGHT)
def test_the_fixes_keep_right_values(answer: str, gold: str) -> None:
    assert grade_answer(boxed(answer), gold, timeout=30) is True


def test_long_rationals_need_a_proof() -> None:
    approx = sympy.Rational(_pi_digits(200))
    assert not numbers_equal(approx, sympy.pi)
    assert numbers_equal(
        sympy.Rational(10**50 + 1, 10**50) * 2, sympy.Rational(2 * 10**50 + 2, 10**50)
    )
    assert numbers_equal(sympy.log(8) / sympy.log(2), sympy.Integer(3))


# -- right values graded right --------------------------------------------------------------------


def test_correct_box_after_a_million_characters_of_prose() -> None:
    response = "We keep thinking. " * 60_000 + "\\boxed{7}"
    assert len(response) > 1_000_000
    assert grade_answer(response, "7", timeout=30) is True
    assert grade_answer(response, "8", timeout=30) is False


def _matrix(cells: list[list[str]], env: str = "pmatrix") -> str:
    body = " \\\\ ".join(" & ".join(row) for row in cells)
    return f"\\begin{{{env}}}{body}\\end{{{env}}}"


def test_hundred_by_hundred_matrix_equal_to_gold() -> None:
    n = 100
    gold = _matrix([[str(i * n + j) for j in range(n)] for i in range(n)])
    same = _matrix(
        [[f"\\frac{{{2 * (i * n + j)}}}{{2}}" for j in range(n)] for i in range(n)], "bmatrix"
    )
    one_off = gold.replace(" 5050 ", " 5051 ")
    assert one_off != gold
    assert grade_answer(boxed(gold), gold, timeout=60) is True
    assert grade_answer(boxed(same), gold, timeout=60) is True
    assert grade_answer(boxed(one_off), gold, timeout=60) is False
    too_big = _matrix([["1"] * (n + 1)] * n)
    with pytest.raises(ValueError, match="columns"):
        parse_answer(too_big)


# -- the time bound under concurrency -------------------------------------------------------------

_SLOW = "\\boxed{(a+b+c+d+e+1)^{60}(a-1)}"  # hours of expansion without a limit
_SLOW_GOLD = "(a+b+c+d+e+1)^{60}a-(a+b+c+d+e+1)^{60}"

# A fresh interpreter (sympy's submodules not imported yet) grades from four threads with limits
# near each call's cost, so time-outs land while sympy imports lazily. Before issue 27 a time-out
# raised inside the import machinery left a module lock held and the other threads waited forever,
# or surfaced after the block as "Exception ignored in thread ...".
_THREADS_SCRIPT = (
    textwrap.dedent(
        r"""
    import sys, threading, time
    from concurrent.futures import ThreadPoolExecutor
    from marft_envs.math.grading import grade_answer

    cases = [
        ("\\boxed{\\frac{\\sqrt{6}-\\sqrt{2}}{4}}", "\\sin(\\frac{\\pi}{12})"),
        ("\\boxed{x^2+2x+1}", "(x+1)^2"),
        ("\\boxed{\\{1,2\\} \\cup (3, 4]}", "(3,4] \\cup \\{2, 1\\}"),
        ("\\boxed{-2 \\le x < 1}", "[-2, 1)"),
        ("\\boxed{\\tan^{-1} 1}", "\\frac{\\pi}{4}"),
        (SLOW, SLOW_GOLD),
    ]

    def work(i):
        response, gold = cases[i % len(cases)]
        limit = 0.002 * (1 + i % 25)
        start = time.monotonic()
        result = grade_answer(response, gold, timeout=limit)
        return type(result).__name__, time.monotonic() - start - limit

    with ThreadPoolExecutor(max_workers=4) as pool:
        got = list(pool.map(work, range(200)))
    assert all(kind == "bool" for kind, _ in got), got
    print("overrun", max(over for _, over in got))
    print("threads", threading.active_count())
    """
    )
    .replace("SLOW_GOLD", repr(_SLOW_GOLD))
    .replace("SLOW", repr(_SLOW))
)


def test_grading_from_threads_neither_hangs_nor_leaks_timeouts() -> None:
    result = subprocess.run(
        [sys.executable, "-c", _THREADS_SCRIPT],
        capture_output=True,
        text=True,
        timeout=600,  # a hang (a lock left held) runs into this; a healthy run takes seconds
        cwd=REPO_ROOT,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Exception ignored" not in result.stderr, result.stderr[-3000:]
    assert "GradingTimeout" not in result.stderr, result.stderr[-3000:]
    assert "overrun" in result.stdout


def _grade_slow(limit: float) -> tuple[bool, float]:
    start = time.monotonic()
    result = grade_answer(_SLOW, _SLOW_GOLD, timeout=limit)
    return result, time.monotonic() - start


def test_time_bound_holds_in_several_processes() -> None:
    # Without the bound each call would run for hours; 60 s is a bound no loaded machine misses
    # and no unbounded call meets.
    with ProcessPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(_grade_slow, [0.2] * 4))
    assert [r for r, _ in results] == [False] * 4
    assert max(elapsed for _, elapsed in results) < 60


def test_time_limit_raises_only_in_its_own_thread_and_restores_tracing() -> None:
    def tracer(frame: object, event: str, arg: object) -> None:
        return None

    sys.settrace(tracer)
    try:
        with pytest.raises(GradingTimeout), time_limit(0.05):
            while True:
                sympy.Integer(3) + sympy.Integer(4)  # sympy code: interrupted at a call
        assert sys.gettrace() is tracer
    finally:
        sys.settrace(None)
    # Nothing is left pending: later sympy work in this thread runs to the end.
    with time_limit(30):
        assert sympy.expand((sympy.Symbol("x") + 1) ** 30).coeff(sympy.Symbol("x"), 1) == 30
    time.sleep(0.1)
    assert sympy.factorint(2**20) == {2: 20}


def test_a_loop_without_calls_in_sympy_is_interrupted() -> None:
    # sympy's multinomial expansion loops for a long time inside one frame without calling a
    # Python function; the deadline marks the running frames so the next line raises.
    from sympy.ntheory.multinomial import multinomial_coefficients

    start = time.monotonic()
    with pytest.raises(GradingTimeout), time_limit(0.2):
        multinomial_coefficients(7, 200)
    assert time.monotonic() - start < 60


def test_normalisation_leaves_malformed_numerals_unparsable() -> None:
    assert normalize_answer("5_{1000}") == "5_{1000}"
    assert normalize_answer("52_8") == "52"
    with pytest.raises(ValueError):
        parse_answer("0.\\overline{3}5")


def test_a_time_out_is_never_raised_into_a_generator_being_closed() -> None:
    # A generator of sympy's that the garbage collector closes after the deadline is resumed
    # with GeneratorExit; raising the time-out there cannot reach the grader and surfaced as
    # "Exception ignored in: <generator object FactKB.deduce_all_facts...>" under load.
    import gc
    import os

    from marft_envs.math.grading import timeout as timeout_module

    source = "def numbers():\n    yield 1\n    yield 2\n"
    namespace: dict[str, object] = {}
    grader_file = os.path.join(os.path.dirname(timeout_module.__file__), "_generator_case.py")
    exec(compile(source, grader_file, "exec"), namespace)  # code that counts as the grader's
    numbers = namespace["numbers"]
    unraisable: list[BaseException | None] = []
    hook = sys.unraisablehook
    sys.unraisablehook = lambda report: unraisable.append(report.exc_value)
    try:
        with time_limit(0.01):
            generator = numbers()  # type: ignore[operator]
            assert next(generator) == 1
            time.sleep(0.1)  # past the deadline, in the standard library (never interrupted)
            del generator  # closed here: resumed with GeneratorExit
            gc.collect()
    finally:
        sys.unraisablehook = hook
    assert not [e for e in unraisable if isinstance(e, GradingTimeout)], unraisable


# -- a numeric question wants the number, not its computation (math-*-v3) ------------------------
# RL policies learned to answer "Compute 6 \times 8 - 9." by restating the expression, which has
# the gold value: a reward for not solving.


def _response(answer: str, boxed: bool) -> str:
    """The answer boxed inside a sentence, or bare."""
    return f"The answer is $\\boxed{{{answer}}}$." if boxed else answer


RESTATED = [
    ("6 \\times 8 - 9.", "39"),
    ("6 \\times 8 - 9", "39"),
    ("48 - 9", "39"),
    ("3 \\cdot 5", "15"),
    ("2^{10}", "1024"),
    ("10^{3}", "1000"),
    ("\\sqrt{16}", "4"),
    ("\\frac{17}{19} + \\frac{13}{19}", "\\frac{30}{19}"),
    ("\\frac{17}{19} + \\frac{13}{19}", "30/19"),
    ("(48 - 9)", "39"),
    ("-(4)", "-4"),
    ("x = 6 \\times 8 - 9", "39"),
    ("39 = 6 \\times 8 - 9", "39"),  # the chain's last side is what is compared
    ("\\text{6 \\times 8 - 9}", "39"),
    ("6 \\times 8 - 9 \\text{ apples}", "39"),
    ("\\$6 \\times 8 - 9", "39"),
    ("1{,}000 + 0", "1000"),
    ("\\frac{6}{4} \\cdot 1", "\\frac{3}{2}"),
    ("0.1+0.2", "0.3"),
    ("5!", "120"),
    ("\\binom{5}{2}", "10"),
]


@pytest.mark.parametrize(("answer", "gold"), RESTATED)
@pytest.mark.parametrize("boxed", [True, False])
def test_a_computation_is_not_the_number_it_gives(answer: str, gold: str, boxed: bool) -> None:
    assert grade_answer(_response(answer, boxed), gold) is False


STATED = [
    ("39", "39"),
    ("39.0", "39"),
    ("39.", "39"),
    ("-4", "-4"),
    ("+3", "3"),
    ("6 \\times 8 - 9 = 48 - 9 = 39", "39"),  # worked out to the number
    ("x = 6 \\times 8 - 9 = 39", "39"),
    ("x = 39", "39"),
    ("\\frac{6}{4}", "\\frac{3}{2}"),  # unsimplified, still a number written out
    ("\\dfrac{6}{4}", "1.5"),
    ("\\frac{-3}{2}", "-\\frac{3}{2}"),
    ("3/2", "\\frac32"),
    ("(3)/(2)", "\\frac32"),
    ("1.5", "\\frac{3}{2}"),
    ("2\\frac{1}{2}", "\\frac{5}{2}"),  # a mixed number
    ("0.\\overline{3}", "\\frac{1}{3}"),
    ("1,000", "1000"),
    ("1{,}000", "1000"),
    ("\\$1,000", "1000"),
    ("50\\%", "50"),
    ("39^\\circ", "39"),
    ("5 \\text{ cm}", "5"),
    ("\\text{39}", "39"),
    ("{39}", "39"),
    ("(39)", "39"),
    ("1.5 \\times 10^{6}", "1500000"),  # scientific notation
    ("15 \\cdot 10^2", "1500"),
]


@pytest.mark.parametrize(("answer", "gold"), STATED)
@pytest.mark.parametrize("boxed", [True, False])
def test_a_number_is_still_right_in_any_written_form(answer: str, gold: str, boxed: bool) -> None:
    assert grade_answer(_response(answer, boxed), gold) is True


NOT_NUMBERS = [  # gold answers that are not plain numbers: values compared, as before
    ("2^{10}", "2^{10}"),
    ("1024", "2^{10}"),
    ("\\sqrt{16}", "\\sqrt{16}"),
    ("2\\sqrt{2}", "\\sqrt{8}"),
    ("\\frac{\\sqrt{2}}{2}", "\\frac{1}{\\sqrt{2}}"),
    ("2\\pi", "\\pi + \\pi"),
    ("x^2 + 2x + 1", "(x+1)^2"),
    ("y = 2x + 1", "2x - y + 1 = 0"),
    ("(1, 2 + 1)", "(1, 3)"),
    ("\\{1, 2 + 1\\}", "\\{3, 1\\}"),
    ("[0, 1 + 1)", "[0, 2)"),
    ("\\begin{pmatrix} 1 & 1 + 1 \\end{pmatrix}", "\\begin{pmatrix} 1 & 2 \\end{pmatrix}"),
]


@pytest.mark.parametrize(("answer", "gold"), NOT_NUMBERS)
def test_other_gold_answers_are_graded_on_values_as_before(answer: str, gold: str) -> None:
    assert grade_answer(_response(answer, boxed=True), gold) is True


# -- an empty text block is nothing: it does not turn a computation into text (math-*-v4) --------

EMPTY_TEXT_RESTATED = [
    ("\\text{}6\\times 8-9", "39"),
    ("6\\times 8\\text{ }-9", "39"),
    ("6\\times 8-9\\text{}", "39"),
    ("\\mbox{}6\\times 8-9", "39"),
    ("\\textbf{ }6\\times 8-9", "39"),
    ("\\textit{}6\\times 8-9", "39"),
    ("\\textrm{}6\\times 8-9", "39"),
    ("\\textnormal{}6\\times 8-9", "39"),
    ("\\text{\\text{}}6\\times 8-9", "39"),
    ("\\text{\\ }6\\times 8-9", "39"),
    ("2^{\\text{}10}", "1024"),
    ("39 + 0\\cdot 7", "39"),
    ("39 + 0\\text{}\\cdot 7", "39"),
    ("6\\times 8\\text{.}-9", "39"),
]


@pytest.mark.parametrize(("answer", "gold"), EMPTY_TEXT_RESTATED)
@pytest.mark.parametrize("boxed", [True, False])
def test_an_empty_text_block_does_not_hide_a_computation(
    answer: str, gold: str, boxed: bool
) -> None:
    assert grade_answer(_response(answer, boxed), gold) is False


@pytest.mark.parametrize("answer", ["\\text{}39", "39\\text{ }", "\\mbox{}39", "x = \\text{}39"])
def test_a_number_beside_an_empty_text_block_is_still_right(answer: str) -> None:
    assert grade_answer(_response(answer, boxed=True), "39") is True


def test_a_text_answer_is_judged_by_what_it_wraps() -> None:
    from marft_envs.math.grading import Text, states_the_number

    gold = parse_answer("39")
    assert states_the_number(gold, Text("\\text{6\\times 8-9}", "")) is False
    assert states_the_number(gold, Text("\\text{39}", "")) is True
    assert normalize_answer("6\\times 8\\text{ }-9") == "6\\times 8 -9"
