"""Answers read as sets of real numbers: intervals, one-variable inequalities, set-builder sets.

``[-2, 1)``, ``-2 \\le x < 1``, ``1 > x \\ge -2`` and ``\\{x \\mid -2 \\le x < 1\\}`` all denote the
same set, and graders accept one for another. Only forms whose set is clear are read: linear
inequalities in one variable, chains ``a < x < b`` with numeric ends, brackets holding two real
numbers in increasing order, unions of those, and set-builder sets over one of them.
"""

from __future__ import annotations

import sympy

from marft_envs.math.grading.answers import (
    Answer,
    Chain,
    Inequality,
    Scalar,
    Sequence,
    SetBuilder,
    Union,
)

__all__ = ["RealSet", "real_set", "sets_equal"]

# The set, and the variable it was stated in (None for brackets, which name no variable).
RealSet = tuple[sympy.Set, sympy.Symbol | None]

_INTERVAL_KINDS = {
    "()": (True, True),
    "[]": (False, False),
    "(]": (True, False),
    "[)": (False, True),
}


def _real_number(value: sympy.Expr) -> bool:
    return not value.free_symbols and value.is_extended_real is True


def _interval(seq: Sequence) -> sympy.Set | None:
    if seq.kind not in _INTERVAL_KINDS or len(seq.items) != 2:
        return None
    lo, hi = seq.items
    if not (isinstance(lo, Scalar) and isinstance(hi, Scalar)):
        return None
    if (
        not (_real_number(lo.value) and _real_number(hi.value))
        or (hi.value - lo.value).is_extended_positive is not True
    ):
        return None
    left_open, right_open = _INTERVAL_KINDS[seq.kind]
    return sympy.Interval(
        lo.value, hi.value, left_open or lo.value == -sympy.oo, right_open or hi.value == sympy.oo
    )


def _inequality(value: sympy.Expr, strict: bool) -> RealSet | None:
    """``value < 0`` (or ``<= 0``) for ``value`` linear in one symbol, as an interval."""
    if len(value.free_symbols) != 1:
        return None
    (x,) = value.free_symbols
    slope = sympy.diff(value, x)
    rest = sympy.expand(value - slope * x)
    if (
        slope.free_symbols
        or rest.free_symbols
        or not _real_number(slope)
        or slope == 0
        or not _real_number(rest)
    ):
        return None
    bound = -rest / slope
    if slope.is_extended_positive:
        return sympy.Interval(-sympy.oo, bound, True, strict), x
    return sympy.Interval(bound, sympy.oo, strict, True), x


def _chain(chain: Chain) -> RealSet | None:
    """``a < x \\le b``: numbers at both ends, one bare variable in the middle."""
    if len(chain.sides) != 3:
        return None
    lo, x, hi = chain.sides
    if not isinstance(x, sympy.Symbol) or not (_real_number(lo) and _real_number(hi)):
        return None
    return sympy.Interval(lo, hi, chain.strict[0], chain.strict[1]), x


def real_set(answer: Answer) -> RealSet | None:
    """The set of reals ``answer`` denotes, with its variable, or ``None`` if it is not read as one.

    Args:
        answer: A parsed answer.

    Returns:
        ``(set, variable)``; the variable is ``None`` for bracket intervals.
    """
    if isinstance(answer, Sequence):
        interval = _interval(answer)
        return None if interval is None else (interval, None)
    if isinstance(answer, Inequality):
        return _inequality(answer.value, answer.strict)
    if isinstance(answer, Chain):
        return _chain(answer)
    if isinstance(answer, Union):
        parts = [real_set(p) for p in answer.parts]
        if any(p is None for p in parts):
            return None
        variables = {v for _, v in parts if v is not None}  # type: ignore[misc]
        if len(variables) > 1:
            return None
        return sympy.Union(*(s for s, _ in parts)), next(iter(variables), None)  # type: ignore[misc]
    if isinstance(answer, SetBuilder):
        inner = real_set(answer.condition)
        if inner is None or inner[1] not in (None, answer.variable):
            return None
        return inner[0], answer.variable
    return None


def sets_equal(a: RealSet, b: RealSet) -> bool:
    """Whether two real sets are equal (and stated in the same variable, where both name one)."""
    (set_a, var_a), (set_b, var_b) = a, b
    if var_a is not None and var_b is not None and var_a != var_b:
        return False
    if set_a == set_b:
        return True
    difference = sympy.Union(sympy.Complement(set_a, set_b), sympy.Complement(set_b, set_a))
    return difference is sympy.S.EmptySet
