"""When two structured answers are equal: structure first, then values.

Exact rationals are compared directly, other numbers to 40 significant digits (confirmed at 150),
expressions symbolically; equations up to a nonzero factor, inequalities up to a positive one;
intervals, inequalities in one variable and set-builder sets as the sets of reals they denote.
One rule is about form: for a plain-number gold, an answer that restates a computation of the
problem is refused (:func:`states_the_number`, :func:`restates_problem`).
"""

from __future__ import annotations

import functools
import re

import sympy

from marft_envs.math.grading.answers import (
    Answer,
    Chain,
    Equation,
    Inequality,
    Matrix,
    Scalar,
    Sequence,
    SetBuilder,
    Text,
    Union,
    parse_structure,
)
from marft_envs.math.grading.normalize import (
    normalize_answer,
    strip_text_units,
    text_key,
    unwrap_text,
)
from marft_envs.math.grading.numeric import numbers_equal
from marft_envs.math.grading.sets import real_set, sets_equal

__all__ = [
    "answers_equal",
    "exprs_equal",
    "is_number_literal",
    "restates_problem",
    "states_the_number",
]

_TEXT_RE = re.compile(r"\\(?:text|textrm|textnormal|textbf|textit|mbox)\s*\{")
_WORD_RE = re.compile(r"(?<![\\a-zA-Z])[a-zA-Z]{2,}")

# -- form: a numeric question wants a number ---------------------------------------------------

_INT = r"[-+]?\d+"
_TERM = rf"(?:{_INT}|\({_INT}\))"  # -3 or (-3), a numerator or denominator of a/b
_NUMBER_LITERAL_RE = re.compile(
    r"[-+]?(?:"
    r"\d+(?:\.\d*)?|\.\d+"  # 39, 39.0, .5
    rf"|\\frac(?:\{{{_INT}\}}\{{{_INT}\}}|\d\d)"  # \frac{6}{4}, \frac{-3}{2}, \frac34
    rf"|{_TERM}/{_TERM}"  # 3/2, (3)/(2), (-3)/4, -1/-2
    r"|\(\d+\+\\frac\{\d+\}\{\d+\}\)"  # a mixed number 2\frac{1}{2}, as normalised
    r"|(?:\d+(?:\.\d*)?|\.\d+)(?:\\times|\\cdot)10\^(?:\{[-+]?\d+\}|\d)"  # 1.5 \times 10^{6}
    r")"
)


def is_number_literal(text: str) -> bool:
    """Whether normalised ``text`` is a number written out, not a computation to be done.

    Number literals: an integer or decimal (``39``, ``-4``, ``39.0``), a fraction of two integers
    (``\\frac{6}{4}``, ``3/2``; unsimplified is fine), a mixed number, and scientific notation,
    a decimal times a power of ten (``1.5 \\times 10^{6}``, ``15 \\cdot 10^2``; a bare power such
    as ``10^{9}`` is a computation), optionally signed, in any number of braces (``-{5}``,
    ``{{{5}}}``; braces are invisible in TeX) and in one pair of parentheses (``(39)``; ``-(4)``
    is a computation). Thousands separators, ``$``, percent signs and units are gone by now
    (:func:`~marft_envs.math.grading.normalize.normalize_answer`).
    """
    compact = re.sub(r"\s+", "", text)
    parentheses = 0
    while not _NUMBER_LITERAL_RE.fullmatch(compact):
        sign = compact[:1] if compact[:1] in ("-", "+") else ""
        body = compact[len(sign) :]
        if len(body) < 3 or body[0] + body[-1] not in ("{}", "()") or not _encloses(body):
            return False
        if body[0] == "(":
            parentheses += 1
            if sign or parentheses > 1:
                return False
        inner = body[1:-1]
        if sign and inner[:1] in ("-", "+"):
            return False  # -{-5}: two signs are a computation
        compact = sign + inner
    return True


def _encloses(text: str) -> bool:
    """Whether the bracket opening ``text`` is the one that closes it (``(1)+(2)`` is not)."""
    depth = 0
    for i, char in enumerate(text):
        if char in "({":
            depth += 1
        elif char in ")}":
            depth -= 1
            if depth == 0:
                return i == len(text) - 1
    return False


# -- form: restating the problem is no answer ---------------------------------------------------

# A computation in the problem: a run of math (no word of two or more letters) with an operator.
_PROBLEM_WORD_RE = re.compile(
    r"(?<![\\a-zA-Z])[a-zA-Z]{2,}(?![a-zA-Z])|\$|\\[()\[\]]|[?!:;]\s|[.,]\s|[.,]$"
)
_OPERATOR_RE = re.compile(
    r"[-+*/^!]|\\(?:frac|sqrt|binom|choose|times|cdot|ast|div|pm|log|ln|sin|cos|tan)(?![a-zA-Z])"
)


_SHORT_ARGS_RE = re.compile(r"(\\(?:frac|binom)|\\sqrt|[\^_])\s*([0-9a-zA-Z])(?:\s*([0-9]))?")


def _explicit_args(m: re.Match[str]) -> str:
    """``\\frac34`` as ``\\frac{3}{4}``, ``2^3`` as ``2^{3}``: one spelling for each."""
    command, first, second = m.group(1), m.group(2), m.group(3)
    if command in ("\\frac", "\\binom") and second is not None:
        return f"{command}{{{first}}}{{{second}}}"
    return f"{command}{{{first}}}" + (second or "")


def _drop_grouping_braces(text: str) -> str:
    """Remove braces that only group (``{6\\times 8}``); keep the arguments of commands,
    powers and subscripts, so ``\\frac{6}{4}`` never reads as ``64``."""
    out: list[str] = []
    kept: list[bool] = []
    for char in text:
        if char == "{":
            previous = "".join(out[-12:])
            keep = bool(out) and (out[-1] in "^_}]" or re.search(r"\\[a-zA-Z]+$", previous))
            kept.append(bool(keep))
            if keep:
                out.append(char)
        elif char == "}" and kept:
            if kept.pop():
                out.append(char)
        else:
            out.append(char)
    return "".join(out)


def _restating_key(text: str) -> str:
    """The form of ``text`` in which restatements are looked for: layout and synonyms gone."""
    s = normalize_answer(text)
    s = re.sub(r"\\(?:times|cdot|ast)(?![a-zA-Z])|\*", "*", s)
    s = re.sub(r"\\div(?![a-zA-Z])", "/", s)
    s = re.sub(r"\s+", "", s)
    s = _SHORT_ARGS_RE.sub(_explicit_args, s)
    return _drop_grouping_braces(s)


def _occurs(needle: str, haystack: str) -> bool:
    """Whether ``needle`` occurs in ``haystack`` as a whole: not inside a longer numeral."""
    start = haystack.find(needle)
    while start >= 0:
        before = haystack[start - 1 : start]
        after = haystack[start + len(needle) : start + len(needle) + 1]
        if not (needle[0].isdigit() and before and (before.isdigit() or before == ".")) and not (
            needle[-1].isdigit() and after and (after.isdigit() or after == ".")
        ):
            return True
        start = haystack.find(needle, start + 1)
    return False


@functools.lru_cache(maxsize=4096)
def _problem_keys(problem: str) -> tuple[str, tuple[str, ...]]:
    """The restating key of ``problem`` and of each computation written in it."""
    return _restating_key(problem), tuple(_problem_computations(problem))


def _problem_computations(problem: str) -> list[str]:
    """Keys of the computations written in ``problem`` (``6 \\times 8 - 9``, ``2^{10}``)."""
    runs = _PROBLEM_WORD_RE.split(problem)
    keys = []
    for run in runs:
        if not re.search(r"\d", run) or not _OPERATOR_RE.search(run):
            continue
        try:
            key = _restating_key(run)
        except (ValueError, TypeError, RecursionError):
            continue
        key = key.strip("=")
        if len(key) >= 3 and _OPERATOR_RE.search(key) and not is_number_literal(key):
            keys.append(key)
    return keys


def restates_problem(answer: str, problem: str) -> bool:
    """Whether ``answer`` (a normalised expression) restates a computation of ``problem``.

    True when the answer, normalised, occurs in the normalised problem ("Compute $6 \\times 8 -
    9$." answered ``6 \\cdot 8 - 9``), or when a computation written in the problem (a run of
    math between its words holding an operator) occurs in the answer (``(6\\times 8-9)+0``).
    Spaces, braces, ``\\left``/``\\right``, ``\\dfrac`` and the other presentation rules
    of :func:`~marft_envs.math.grading.normalize.normalize_answer` do not count, and ``\\times``,
    ``\\cdot`` and ``*`` are one sign, as are ``\\div`` and ``/``.

    Args:
        answer: The compared text of the answer.
        problem: The problem statement the answer was given for.

    Returns:
        Whether the answer copies a computation the problem already wrote out.
    """
    key = _restating_key(answer)
    if not key:
        return False
    problem_key, computations = _problem_keys(problem)
    return _occurs(key, problem_key) or any(_occurs(c, key) for c in computations)


def states_the_number(gold: Answer, pred: Answer, problem: str | None = None) -> bool:
    """When the gold answer is a plain number, the answer must be one too, not its computation.

    The grader compares values, so without this rule an answer that restates the problem's own
    expression (``6 \\times 8 - 9`` for "Compute $6 \\times 8 - 9$.", ``2^{10}`` for 1024,
    ``\\frac{17}{19} + \\frac{13}{19}`` for ``\\frac{30}{19}``) has the gold value and was paid:
    RL policies learned to answer "Compute ..." problems by copying them instead of solving them.
    So when the gold is a number literal (:func:`is_number_literal`), a scalar answer must be a
    number literal as well. What is judged is the compared value's own text: the name of
    ``x = 39`` is not part of it, and in a worked chain ``6 \\times 8 - 9 = 48 - 9 = 39`` only
    the last side is, so a computation written out to its result is still right. Any other gold
    (expressions, sets, intervals, equations, matrices, ...) is graded on values alone, as before.
    An answer read as text (``\\text{6 \\times 8 - 9}``) is judged by what its text blocks wrap,
    since that is what :func:`answers_equal` compares once the text is unwrapped, however many
    layers deep.

    With the ``problem`` text (the envs pass it), only a restatement is refused: an unevaluated
    form that does not copy a computation of the problem (``2^{10}`` for "How many subsets has a
    10-element set?", ``\\binom{10}{3}``, ``5!``) is a legitimate answer and is compared on
    value; one that does (:func:`restates_problem`) is not. Without it (the grader called
    alone) restating cannot be told from solving, and every computation is refused.

    Args:
        gold: The parsed gold answer.
        pred: The parsed answer to grade.
        problem: The problem statement, or ``None`` when it is not known.

    Returns:
        ``False`` only when the gold is a plain number and ``pred`` is a scalar, or text wrapping
        one, that is not a number and (with ``problem``) restates the problem.
    """
    if not isinstance(gold, Scalar) or not is_number_literal(gold.raw.split("=")[-1]):
        return True
    if isinstance(pred, Text):
        wrapped = pred.raw
        while True:  # \\text{\\text{...}}: the rule holds after every unwrapping
            inner = strip_text_units(unwrap_text(wrapped)).strip()
            if inner == wrapped:
                break
            wrapped = inner
        compared = wrapped.split("=")[-1]
    elif isinstance(pred, Scalar):
        compared = pred.raw.split("=")[-1]
    else:
        return True
    if is_number_literal(compared):
        return True
    return problem is not None and not restates_problem(compared, problem)


# -- comparison ---------------------------------------------------------------------------------

_PROBE_POINTS = (
    (sympy.Rational(7, 3), sympy.Rational(-5, 11), sympy.Rational(13, 17)),
    (sympy.Rational(-3, 2), sympy.Rational(11, 7), sympy.Rational(2, 9)),
    (sympy.Rational(5, 13), sympy.Rational(17, 6), sympy.Rational(-19, 10)),
)


def _probe_differs(a: sympy.Expr, b: sympy.Expr, symbols: list[sympy.Symbol]) -> bool:
    """True when a numeric substitution shows the expressions differ (a cheap early reject)."""
    for point in _PROBE_POINTS:
        subs = {s: point[i % len(point)] + i // len(point) for i, s in enumerate(symbols)}
        try:
            va = a.subs(subs).evalf(30)
            vb = b.subs(subs).evalf(30)
            diff = abs(complex(va - vb))
            scale = max(abs(complex(va)), abs(complex(vb)), 1e-30)
        except (TypeError, ValueError, ZeroDivisionError, OverflowError):
            continue
        if diff != diff or scale == float("inf"):
            continue
        if diff > 1e-12 * scale:
            return True
    return False


def _ratio_varies(a: sympy.Expr, b: sympy.Expr, symbols: list[sympy.Symbol]) -> bool:
    """True when a/b takes two clearly different values at the probe points (not proportional)."""
    values = []
    for point in _PROBE_POINTS:
        subs = {s: point[i % len(point)] + i // len(point) for i, s in enumerate(symbols)}
        try:
            value = complex((a.subs(subs) / b.subs(subs)).evalf(30))
        except (TypeError, ValueError, ZeroDivisionError, OverflowError):
            continue
        if value != value or abs(value) == float("inf"):
            continue
        values.append(value)
    return any(abs(v - values[0]) > 1e-9 * max(abs(v), abs(values[0]), 1.0) for v in values)


def exprs_equal(a: sympy.Expr, b: sympy.Expr) -> bool:
    """Whether two sympy expressions are mathematically equal (exactly, or to 40 digits)."""
    if a == b:
        return True
    symbols = sorted(a.free_symbols | b.free_symbols, key=str)
    if not symbols:
        return numbers_equal(a, b)
    if _probe_differs(a, b, symbols):
        return False
    diff = a - b
    if sympy.expand(diff) == 0:
        return True
    return bool(sympy.simplify(diff) == 0)


def _proportional(a: sympy.Expr, b: sympy.Expr, *, positive: bool) -> bool:
    if a == 0 or b == 0:
        return False
    if a == b:
        return True
    symbols = sorted(a.free_symbols | b.free_symbols, key=str)
    if symbols and _ratio_varies(a, b, symbols):
        return False
    ratio = sympy.cancel(a / b)
    if ratio.free_symbols:
        ratio = sympy.simplify(ratio)
    if ratio.free_symbols or not ratio.is_number or ratio.has(sympy.oo, sympy.zoo, sympy.nan):
        return False
    if ratio == 0:
        return False
    return bool(ratio > 0) if positive else True


def _match_unordered(gold: tuple[Answer, ...], pred: tuple[Answer, ...]) -> bool:
    if len(gold) != len(pred):
        return False
    used = [False] * len(pred)

    def assign(i: int) -> bool:
        if i == len(gold):
            return True
        for j, p in enumerate(pred):
            if not used[j] and answers_equal(gold[i], p):
                used[j] = True
                if assign(i + 1):
                    return True
                used[j] = False
        return False

    return assign(0)


def _as_sets(gold: Answer, pred: Answer) -> bool:
    """Different forms of one set of reals: an interval, an inequality, a set-builder set.

    Only tried when the two answers are not of one kind (same kinds compare by their own rule)
    and at least one side states a condition, so two tuples are never read as intervals.
    """
    if type(gold) is type(pred) and not isinstance(gold, (Union, SetBuilder)):
        return False
    if not (_states_condition(gold) or _states_condition(pred)):
        return False
    gold_set, pred_set = real_set(gold), real_set(pred)
    return gold_set is not None and pred_set is not None and sets_equal(gold_set, pred_set)


def _states_condition(answer: Answer) -> bool:
    if isinstance(answer, Union):
        return any(_states_condition(p) for p in answer.parts)
    return isinstance(answer, (Inequality, Chain, SetBuilder))


def answers_equal(gold: Answer, pred: Answer) -> bool:
    """Whether ``pred`` is mathematically the same answer as ``gold``.

    Args:
        gold: The reference answer.
        pred: The answer to grade.

    Returns:
        ``True`` when they are equivalent under the rules in the module docstring.
    """
    if isinstance(gold, Text):
        return bool(gold.key) and gold.key == text_key(pred.raw)
    if isinstance(pred, Text):
        # "\\text{5}" against a math gold: read what the text wraps as math, once.
        unwrapped = strip_text_units(unwrap_text(pred.raw)).strip()
        if unwrapped == pred.raw or _TEXT_RE.search(unwrapped) or _WORD_RE.search(unwrapped):
            return False  # words left after the units went may change the value: "5 thousand"
        try:
            reparsed = parse_structure(unwrapped)
        except (ValueError, TypeError, ZeroDivisionError, OverflowError):
            return False
        return answers_equal(gold, reparsed)
    if isinstance(gold, Scalar) and isinstance(pred, Scalar):
        return exprs_equal(gold.value, pred.value)
    if isinstance(gold, Equation) and isinstance(pred, Scalar) and pred.assigned is not None:
        pred = Equation(pred.raw, pred.assigned - pred.value)
    if isinstance(pred, Equation) and isinstance(gold, Scalar) and gold.assigned is not None:
        gold = Equation(gold.raw, gold.assigned - gold.value)
    if isinstance(gold, Equation) and isinstance(pred, Equation):
        return _proportional(gold.value, pred.value, positive=False)
    if isinstance(gold, Inequality) and isinstance(pred, Inequality):
        return gold.strict == pred.strict and _proportional(gold.value, pred.value, positive=True)
    if _as_sets(gold, pred):
        return True
    if isinstance(gold, Sequence) and isinstance(pred, Sequence):
        if gold.unordered and pred.unordered:
            return _match_unordered(gold.items, pred.items)
        if gold.kind != pred.kind or len(gold.items) != len(pred.items):
            return False
        return all(answers_equal(g, p) for g, p in zip(gold.items, pred.items, strict=True))
    if (
        isinstance(gold, Chain)
        and isinstance(pred, Chain)
        and gold.strict == pred.strict
        and all(exprs_equal(g, p) for g, p in zip(gold.sides, pred.sides, strict=True))
    ):
        return True
    if (
        isinstance(gold, Union)
        and isinstance(pred, Union)
        and _match_unordered(gold.parts, pred.parts)
    ):
        return True
    if isinstance(gold, Matrix) and isinstance(pred, Matrix):
        if [len(r) for r in gold.rows] != [len(r) for r in pred.rows]:
            return False
        return all(
            answers_equal(g, p)
            for grow, prow in zip(gold.rows, pred.rows, strict=True)
            for g, p in zip(grow, prow, strict=True)
        )
    return False
