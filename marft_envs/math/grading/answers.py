"""Structured answers: what a normalised answer string *is*, and when two of them are equal.

An answer is one of: a scalar expression, an equation, an inequality, an ordered bracketed
sequence (tuple, point or interval — the brackets are part of the value), an unordered collection
(a set ``\\{...\\}`` or a bare list of solutions ``1, 2``), a union of intervals, a matrix, or text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import sympy

from marft_envs.math.grading.latex import parse_latex_expr
from marft_envs.math.grading.normalize import strip_text_units, text_key, unwrap_text

__all__ = [
    "MAX_ANSWER_CHARS",
    "Answer",
    "AnswerParseError",
    "Equation",
    "Inequality",
    "Matrix",
    "Scalar",
    "Sequence",
    "Text",
    "Union",
    "answers_equal",
    "exprs_equal",
    "parse_structure",
]

MAX_ANSWER_CHARS = 1_000  # longer "answers" are not answers; refusing them bounds all later work
MAX_ITEMS = 64
_MAX_PM = 6  # 2**6 = MAX_ITEMS answers; more signs would expand exponentially

_OPEN = "([{"
_CLOSE = ")]}"
_THOUSANDS_RE = re.compile(r"[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_ASSIGN_RE = re.compile(
    r"^\s*(?:[a-zA-Z](?:_\{?\w+\}?)?|\\[a-zA-Z]+|[a-zA-Z]\s*\(\s*[a-zA-Z]\s*\)"
    r"|\(\s*[a-zA-Z](?:\s*,\s*[a-zA-Z])+\s*\))\s*(?:=|\\in(?![a-zA-Z]))"
)
_SIMPLE_NAME_RE = re.compile(r"[a-zA-Z](?:_\{?\w+\}?)?|\\[a-zA-Z]+")
_TEXT_RE = re.compile(r"\\(?:text|textrm|textnormal|textbf|textit|mbox)\s*\{")
_WORD_RE = re.compile(r"(?<![\\a-zA-Z])[a-zA-Z]{2,}")
_MATRIX_RE = re.compile(
    r"^\\begin\{([pbB]?matrix|array)\}(?:\{[^}]*\})?(.*)\\end\{\1\}$", re.DOTALL
)
_REL_RE = re.compile(r"\\leq?(?![a-zA-Z])|\\geq?(?![a-zA-Z])|\\neq?(?![a-zA-Z])|<=|>=|<|>|=")


class AnswerParseError(ValueError):
    """The text cannot be read as any kind of answer."""


@dataclass(frozen=True)
class Answer:
    """Base of all structured answers; ``raw`` is the normalised text it came from."""

    raw: str = field(compare=False)


@dataclass(frozen=True)
class Scalar(Answer):
    """One expression: a number, a constant, or an algebraic expression.

    ``assigned`` is the variable of an answer written as ``y = 2x + 1``; it is ignored when
    comparing with another scalar and turns the answer back into an equation when compared
    with an equation.
    """

    value: sympy.Expr
    assigned: sympy.Expr | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Equation(Answer):
    """``lhs = rhs`` kept as ``lhs - rhs``; equal to any nonzero multiple of itself."""

    value: sympy.Expr


@dataclass(frozen=True)
class Inequality(Answer):
    """``lhs < rhs`` (``strict``) or ``lhs <= rhs`` kept as ``lhs - rhs``."""

    value: sympy.Expr
    strict: bool


@dataclass(frozen=True)
class Sequence(Answer):
    """Items in brackets or a bare list.

    ``kind`` is the bracket pair (``"()"``, ``"[]"``, ``"(]"``, ``"[)"``): order and brackets
    matter. ``"set"`` and ``"list"`` are unordered (``\\{1, 2\\}`` and ``1, 2``).
    """

    kind: str
    items: tuple[Answer, ...]

    @property
    def unordered(self) -> bool:
        return self.kind in ("set", "list")


@dataclass(frozen=True)
class Union(Answer):
    """A union of intervals or sets; the order of the parts does not matter."""

    parts: tuple[Answer, ...]


@dataclass(frozen=True)
class Matrix(Answer):
    """A matrix or vector written with a ``matrix`` environment."""

    rows: tuple[tuple[Answer, ...], ...]


@dataclass(frozen=True)
class Text(Answer):
    """Words (a name, a multiple-choice letter); compared by :func:`text_key`."""

    key: str


# -- parsing ------------------------------------------------------------------------------------


def _split_top(text: str, sep: str) -> list[str]:
    """Split on ``sep`` where it is outside every bracket, ``\\{...\\}`` and environment."""
    parts = []
    depth = 0
    start = 0
    i = 0
    while i < len(text):
        if text.startswith("\\begin{", i):
            depth += 1
            i += 7
            continue
        if text.startswith("\\end{", i):
            depth -= 1
            i += 5
            continue
        c = text[i]
        if depth == 0 and text.startswith(sep, i):
            parts.append(text[start:i])
            i += len(sep)
            start = i
            continue
        if c == "\\":
            i += 2  # \{ and \} count as brackets below; other escapes are opaque
            if text[i - 1] in "{":
                depth += 1
            elif text[i - 1] in "}":
                depth -= 1
            continue
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
        i += 1
    parts.append(text[start:])
    return parts


def _outer_brackets(text: str) -> tuple[str, str, str] | None:
    """``(open, inner, close)`` when one bracket pair encloses the whole text."""
    if text.startswith("\\{") and text.endswith("\\}"):
        inner = text[2:-2]
        if _balanced(inner):
            return "{", inner, "}"
        return None
    if len(text) < 2 or text[0] not in "([" or text[-1] not in ")]":
        return None
    depth = 0
    for i, c in enumerate(text):
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
            if depth == 0 and i != len(text) - 1:
                return None
    return text[0], text[1:-1], text[-1]


def _balanced(text: str) -> bool:
    depth = 0
    for c in text:
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth -= 1
            if depth < 0:
                return False
    return depth == 0


def _expand_pm(text: str) -> list[str]:
    """``a \\pm b`` stands for two answers; expand every ``\\pm``/``\\mp`` into both signs."""
    m = re.search(r"\\(pm|mp)(?![a-zA-Z])", text)
    if m is None:
        return [text]
    if len(re.findall(r"\\(?:pm|mp)(?![a-zA-Z])", text)) > _MAX_PM:
        raise AnswerParseError(f"too many '±' signs (more than {_MAX_PM}) in {text[:80]!r}")
    first, second = ("+", "-") if m.group(1) == "pm" else ("-", "+")
    head, tail = text[: m.start()], text[m.end() :]
    return _expand_pm(head + first + tail) + _expand_pm(head + second + tail)


def _scalar(text: str) -> Scalar:
    value = parse_latex_expr(text)
    if value.has(sympy.zoo, sympy.nan):
        raise AnswerParseError(f"{text!r} is undefined (division by zero)")
    return Scalar(text, value)


def _relation(text: str) -> Answer:
    """A scalar, or an (in)equality when the text contains a relation symbol."""
    pieces = _REL_RE.split(text)
    ops = _REL_RE.findall(text)
    if not ops:
        return _scalar(text)
    if len(ops) != 1:
        raise AnswerParseError(f"chained relations are not supported: {text!r}")
    lhs, rhs = (parse_latex_expr(p) for p in pieces)
    op = ops[0]
    if op == "=":
        return Equation(text, lhs - rhs)
    if op.startswith("\\ne"):
        raise AnswerParseError(f"'≠' answers are not supported: {text!r}")
    strict = op in ("<", ">")
    if op in (">", ">=") or op.startswith("\\ge"):
        lhs, rhs = rhs, lhs
    return Inequality(text, lhs - rhs, strict)


def _item(text: str) -> Answer:
    text = text.strip()
    if not text:
        raise AnswerParseError("empty item")
    m = _ASSIGN_RE.match(text)
    if m is not None:
        # "x = 3", "f(x) = ...", "(x, y) = (1, 2)", "x \in [0, 1]": the name is not the answer.
        rest = text[m.end() :].strip()
        if rest:
            inner = parse_structure(rest, prefer_list=False, allow_list=False)
            lhs = re.sub(r"(?:=|\\in)$", "", m.group().strip()).strip()
            if isinstance(inner, Scalar) and _SIMPLE_NAME_RE.fullmatch(lhs):
                return Scalar(inner.raw, inner.value, parse_latex_expr(lhs))
            return inner
    brackets = _outer_brackets(text)
    if brackets is not None:
        return parse_structure(text, prefer_list=False, allow_list=False)
    return _relation(text)


def _matrix(body: str, raw: str) -> Matrix:
    rows = [r for r in re.split(r"\\\\", body) if r.strip()]
    if not rows or len(rows) > MAX_ITEMS:
        raise AnswerParseError(f"bad matrix {raw!r}")
    parsed = tuple(tuple(_item(cell) for cell in row.split("&")) for row in rows)
    if len({len(r) for r in parsed}) != 1:
        raise AnswerParseError(f"ragged matrix {raw!r}")
    return Matrix(raw, parsed)


def parse_structure(text: str, *, prefer_list: bool = False, allow_list: bool = True) -> Answer:
    """Read a normalised answer into its structure (see the module docstring).

    Args:
        text: Output of :func:`~marft_envs.math.grading.normalize.normalize_answer`.
        prefer_list: Read ``1,000`` as the list ``1, 0`` instead of one thousand. Graders set it
            when the gold answer is a list, so the gold decides what a comma means.
        allow_list: Whether a bare top-level comma may make a list (not inside an item).

    Returns:
        The structured answer.

    Raises:
        AnswerParseError: If the text is not an answer this grader understands.
    """
    text = text.strip()
    if not text:
        raise AnswerParseError("empty answer")
    if len(text) > MAX_ANSWER_CHARS:
        raise AnswerParseError(f"answer longer than {MAX_ANSWER_CHARS} characters")
    if _TEXT_RE.search(text):
        return Text(text, text_key(text))
    if not prefer_list and _THOUSANDS_RE.fullmatch(text):
        text = text.replace(",", "")
    m = _MATRIX_RE.match(text)
    if m is not None:
        return _matrix(m.group(2), text)
    if text in ("\\emptyset", "\\varnothing", "\\{\\}", "\\{ \\}"):
        return Sequence(text, "set", ())
    unions = _split_top(text, "\\cup")
    if len(unions) > 1:
        parts = tuple(parse_structure(p, allow_list=False) for p in unions)
        return Union(text, parts)
    brackets = _outer_brackets(text)
    if brackets is not None:
        open_, inner, close = brackets
        pieces = _split_top(inner, ",")
        if open_ == "{":
            items = [e for p in pieces if p.strip() for e in _expand_pm(p)]
            return Sequence(text, "set", tuple(_item(p) for p in items))
        if len(pieces) == 1:
            if open_ + close not in ("()", "[]"):
                raise AnswerParseError(f"mismatched brackets in {text!r}")
            return _relation(text)
        if len(pieces) > MAX_ITEMS:
            raise AnswerParseError("too many items")
        if any("\\pm" in p or "\\mp" in p for p in pieces):
            raise AnswerParseError(f"'±' inside a tuple is ambiguous: {text!r}")
        return Sequence(text, open_ + close, tuple(_item(p) for p in pieces))
    pieces = _split_top(text, ",") if allow_list else [text]
    if len(pieces) > MAX_ITEMS:
        raise AnswerParseError("too many items")
    expanded = [e for p in pieces for e in _expand_pm(p)]
    if len(expanded) == 1:
        return _item(expanded[0])
    return Sequence(text, "list", tuple(_item(p) for p in expanded))


# -- comparison ---------------------------------------------------------------------------------

_REL_TOL = sympy.Float("1e-40", 60)
_REL_TOL_FINE = sympy.Float("1e-150", 200)
_PROBE_POINTS = (
    (sympy.Rational(7, 3), sympy.Rational(-5, 11), sympy.Rational(13, 17)),
    (sympy.Rational(-3, 2), sympy.Rational(11, 7), sympy.Rational(2, 9)),
    (sympy.Rational(5, 13), sympy.Rational(17, 6), sympy.Rational(-19, 10)),
)


def _numbers_equal(a: sympy.Expr, b: sympy.Expr) -> bool:
    if a.is_Rational and b.is_Rational:
        return bool(a == b)
    if a.has(sympy.oo, -sympy.oo) or b.has(sympy.oo, -sympy.oo):
        return bool(a == b)
    va, vb = a.evalf(60), b.evalf(60)
    try:
        complex(va), complex(vb)
    except (TypeError, ValueError):
        # Something evalf cannot reduce to a number; only an exact proof counts.
        return bool(sympy.simplify(a - b) == 0)
    # Rounded decimals never pass: 60 digits are computed and 40 must agree; a pair that passes
    # is checked again at 200 digits, so only numbers equal to ~150 digits count as equal.
    return _close(va, vb, _REL_TOL, 60) and _close(a.evalf(200), b.evalf(200), _REL_TOL_FINE, 200)


def _close(va: sympy.Expr, vb: sympy.Expr, tol: sympy.Float, digits: int) -> bool:
    diff = abs(va - vb).evalf(digits)
    scale = max(abs(va).evalf(digits), abs(vb).evalf(digits))
    if not diff.is_number or not scale.is_number:
        return False
    if scale == 0:
        return bool(diff == 0)
    return bool(diff <= tol * scale)


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
        return _numbers_equal(a, b)
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
    if isinstance(gold, Sequence) and isinstance(pred, Sequence):
        if gold.unordered and pred.unordered:
            return _match_unordered(gold.items, pred.items)
        if gold.kind != pred.kind or len(gold.items) != len(pred.items):
            return False
        return all(answers_equal(g, p) for g, p in zip(gold.items, pred.items, strict=True))
    if isinstance(gold, Union) and isinstance(pred, Union):
        return _match_unordered(gold.parts, pred.parts)
    if isinstance(gold, Matrix) and isinstance(pred, Matrix):
        if [len(r) for r in gold.rows] != [len(r) for r in pred.rows]:
            return False
        return all(
            answers_equal(g, p)
            for grow, prow in zip(gold.rows, pred.rows, strict=True)
            for g, p in zip(grow, prow, strict=True)
        )
    return False
