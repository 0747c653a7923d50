"""When two numbers without free symbols are equal.

Exact rationals compare exactly. Other numbers are compared numerically (40 significant digits at
60-digit precision, confirmed to 150 digits at 200) unless one of them holds a long rational, the
form a decimal approximation takes once parsed: ``3.14159…`` written to 200 digits agrees with
``\\pi`` to 150 digits and is still not ``\\pi``. Such a pair counts as equal only when sympy proves
the difference is zero.
"""

from __future__ import annotations

import sympy

__all__ = ["MAX_EXACT_DIGITS", "numbers_equal"]

MAX_EXACT_DIGITS = 40
"""A rational with more digits than this (numerator or denominator) may be an approximation."""

_REL_TOL = sympy.Float("1e-40", 60)
_REL_TOL_FINE = sympy.Float("1e-150", 200)


def _close(va: sympy.Expr, vb: sympy.Expr, tol: sympy.Float, digits: int) -> bool:
    diff = abs(va - vb).evalf(digits)
    scale = max(abs(va).evalf(digits), abs(vb).evalf(digits))
    if not diff.is_number or not scale.is_number:
        return False
    if scale == 0:
        return bool(diff == 0)
    return bool(diff <= tol * scale)


def _holds_long_rational(value: sympy.Expr) -> bool:
    limit = 10**MAX_EXACT_DIGITS
    return any(
        abs(r.p) >= limit or r.q >= limit  # type: ignore[attr-defined]
        for r in value.atoms(sympy.Rational)
    )


def _proved_equal(a: sympy.Expr, b: sympy.Expr) -> bool:
    try:
        return bool(sympy.simplify(a - b) == 0)
    except (TypeError, ValueError, ZeroDivisionError, OverflowError):
        return False


def numbers_equal(a: sympy.Expr, b: sympy.Expr) -> bool:
    """Whether two numbers (expressions without free symbols) are equal; see the module docstring.

    Args:
        a: A number, e.g. ``sympy.sqrt(2) / 2``.
        b: Another number.

    Returns:
        ``True`` when they are equal.
    """
    if a == b:
        return True
    if a.is_Rational and b.is_Rational:
        return False
    if a.has(sympy.oo, -sympy.oo, sympy.zoo) or b.has(sympy.oo, -sympy.oo, sympy.zoo):
        return False
    va, vb = a.evalf(60), b.evalf(60)
    try:
        complex(va), complex(vb)
    except (TypeError, ValueError):
        return _proved_equal(a, b)  # evalf cannot reduce it to a number: only a proof counts
    # Rounded decimals never pass: 60 digits are computed and 40 must agree; a pair that passes
    # is checked again at 200 digits, so only numbers equal to ~150 digits count as equal.
    if not (
        _close(va, vb, _REL_TOL, 60) and _close(a.evalf(200), b.evalf(200), _REL_TOL_FINE, 200)
    ):
        return False
    if _holds_long_rational(a) or _holds_long_rational(b):
        return _proved_equal(a, b)
    return True
