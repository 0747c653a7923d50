"""Structured answers: what a normalised answer string *is*.

An answer is one of: a scalar expression, an equation, an inequality, a chain of inequalities
(``a < b \\le c``), an ordered bracketed sequence (tuple, point or interval — the brackets are
part of the value), an unordered collection (a set ``\\{...\\}`` or a bare list of solutions
``1, 2``), a set-builder set (``\\{x \\mid x < 3\\}``), a union of intervals, a matrix, or text.
When two answers are equal is :mod:`marft_envs.math.grading.compare`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import sympy

from marft_envs.math.grading.latex import parse_latex_expr
from marft_envs.math.grading.normalize import text_key
from marft_envs.math.grading.numeric import numbers_equal

__all__ = [
    "MAX_ANSWER_CHARS",
    "MAX_MATRIX_CHARS",
    "MAX_MATRIX_SIDE",
    "Answer",
    "AnswerParseError",
    "Chain",
    "Equation",
    "Inequality",
    "Matrix",
    "Scalar",
    "Sequence",
    "SetBuilder",
    "Text",
    "Union",
    "max_answer_chars",
    "parse_structure",
]

MAX_ANSWER_CHARS = 1_000  # longer "answers" are not answers; refusing them bounds all later work
MAX_ITEMS = 64
MAX_MATRIX_SIDE = 100  # rows and columns of a matrix answer
MAX_MATRIX_CHARS = 200_000  # a 100x100 matrix of 10-character entries, with its separators
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
_MATRIX_RE = re.compile(
    r"^\\begin\{([pbB]?matrix|array)\}(?:\{[^}]*\})?(.*)\\end\{\1\}$", re.DOTALL
)
_MATRIX_START_RE = re.compile(r"[\s$]*\\begin\{(?:[pbBvV]?matrix|array)\}")
_REL_RE = re.compile(r"\\leq?(?![a-zA-Z])|\\geq?(?![a-zA-Z])|\\neq?(?![a-zA-Z])|<=|>=|<|>|=")


def max_answer_chars(text: str) -> int:
    """The longest answer of the kind ``text`` starts as: a matrix may hold up to 100x100 cells."""
    return MAX_MATRIX_CHARS if _MATRIX_START_RE.match(text) else MAX_ANSWER_CHARS


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
class Chain(Answer):
    """``a < b \\le c``: two or more inequalities in one direction, written as ``<`` / ``<=``.

    ``sides`` run from the smallest side up (``c > b > a`` is stored as ``a < b < c``) and
    ``strict`` says, for each link, whether it is ``<``.
    """

    sides: tuple[sympy.Expr, ...]
    strict: tuple[bool, ...]


@dataclass(frozen=True)
class SetBuilder(Answer):
    """``\\{x \\mid \\text{condition}\\}``: the set of real ``x`` meeting ``condition``."""

    variable: sympy.Symbol
    condition: Answer


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
    """A scalar, or an (in)equality or chain of them when the text contains relation symbols."""
    pieces = _REL_RE.split(text)
    ops = _REL_RE.findall(text)
    if not ops:
        return _scalar(text)
    if len(ops) > MAX_ITEMS:
        raise AnswerParseError("too many relations")
    if any(op.startswith("\\ne") for op in ops):
        raise AnswerParseError(f"'≠' answers are not supported: {text!r}")
    sides = [parse_latex_expr(p) for p in pieces]
    if all(op == "=" for op in ops):
        return _equalities(text, sides)
    if "=" in ops:
        raise AnswerParseError(f"a chain mixing '=' with inequalities is not supported: {text!r}")
    falling = [op in (">", ">=") or op.startswith("\\ge") for op in ops]
    if any(falling) and not all(falling):
        raise AnswerParseError(f"a chain of inequalities must run in one direction: {text!r}")
    strict = [op in ("<", ">") for op in ops]
    if all(falling):
        sides, strict = sides[::-1], strict[::-1]
    if len(ops) == 1:
        return Inequality(text, sides[0] - sides[1], strict[0])
    return Chain(text, tuple(sides), tuple(strict))


def _equalities(text: str, sides: list[sympy.Expr]) -> Answer:
    """``a = b`` is an equation; ``2 \\cdot 3 = 6`` (every side a number) is its last side.

    A computation written out to its result ends with the answer (``x = 2 \\cdot 3 = 6``; the
    name before it is handled by the assignment rule), also after a name the assignment rule does
    not know (``AB = \\sqrt{3^2+4^2} = 5``: a first side with letters, every later side a number). Numbers that differ (``5 = 6``) are a
    false statement and stay an equation, which never equals a number.
    """
    numeric = all(not side.free_symbols for side in sides)
    if numeric and all(numbers_equal(side, sides[-1]) for side in sides[:-1]):
        return Scalar(text, sides[-1])
    if (
        len(sides) > 2
        and sides[0].free_symbols
        and not any(side.free_symbols for side in sides[1:])
        and all(numbers_equal(side, sides[-1]) for side in sides[1:-1])
    ):
        # AB = \sqrt{3^2+4^2} = 5: a name (a segment, an angle) worked out to its value.
        return Scalar(text, sides[-1])
    if len(sides) == 2:
        return Equation(text, sides[0] - sides[1])
    raise AnswerParseError(
        f"a chain of equalities is read only when every side is the same number: {text!r}"
    )


_SET_BUILDER_RE = re.compile(
    r"^\s*([a-zA-Z](?:_\{?\w+\}?)?)\s*(?:\\in\s*\(-\\infty,\s*\\infty\))?\s*(?:\\mid|\||:|\\colon)(.+)$",
    re.DOTALL,
)


def _set_builder(inner: str, raw: str) -> SetBuilder | None:
    """``x \\mid -2 \\le x < 1`` inside ``\\{...\\}`` as a set-builder set (``None`` if it is not one)."""
    m = _SET_BUILDER_RE.match(inner)
    if m is None:
        return None
    variable = parse_latex_expr(m.group(1))
    if not isinstance(variable, sympy.Symbol):
        raise AnswerParseError(f"the variable of {raw!r} is not a name")
    condition = _item(m.group(2))
    return SetBuilder(raw, variable, condition)


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
    if not rows or len(rows) > MAX_MATRIX_SIDE:
        raise AnswerParseError(f"bad matrix {raw[:80]!r}: 1 to {MAX_MATRIX_SIDE} rows")
    cells = [row.split("&") for row in rows]
    if max(len(row) for row in cells) > MAX_MATRIX_SIDE:
        raise AnswerParseError(f"bad matrix {raw[:80]!r}: more than {MAX_MATRIX_SIDE} columns")
    parsed = tuple(tuple(_item(cell) for cell in row) for row in cells)
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
    if len(text) > max_answer_chars(text):
        raise AnswerParseError(f"answer longer than {max_answer_chars(text)} characters")
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
        if open_ == "{":
            builder = _set_builder(inner, text)
            if builder is not None:
                return builder
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
