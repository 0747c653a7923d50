"""A small, strict LaTeX-to-sympy parser for single mathematical expressions.

Why not ``sympy.parsing.latex``: it needs a pinned ANTLR runtime, it is slow, and it evaluates
whatever it is given (``10^{10^{10}}`` builds a ten-billion-digit integer in one C call that no
time limit can interrupt). This recursive-descent parser builds sympy objects directly, never calls
``eval``, refuses anything it does not understand (an unknown command is an error, not a symbol),
and refuses numbers too large to be an answer before sympy computes them.

Grammar (lowest precedence first)::

    additive := product (("+" | "-") product)*
    product  := signed (("*" | "/" | \\cdot | \\times | \\div) signed | <implicit> power)*
    signed   := ("-" | "+") signed | power
    power    := postfix ("^" exponent)?
    postfix  := atom "!"*
    atom     := number | letter[_sub] | (expr) | {expr} | [expr] | |expr| | \\command ...
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import sympy

__all__ = ["LatexParseError", "parse_latex_expr"]

# Limits that keep a hostile answer from turning into a C-level computation no timer can stop.
MAX_DIGITS = 10_000  # decimal digits of any numeric power the parser lets sympy evaluate
MAX_SYMBOLIC_EXPONENT = 10_000  # |n| in x^n for a non-numeric base
MAX_FACTORIAL = 2_000
MAX_NUMBER_LENGTH = 400  # characters in one numeral
MAX_DEPTH = 60  # nesting of groups; deeper answers are not real answers


class LatexParseError(ValueError):
    """The text is not an expression this parser understands (or is unreasonably large)."""


@dataclass(frozen=True)
class _Tok:
    kind: str  # "num" | "cmd" | "letter" | "op"
    text: str


_TOKEN_RE = re.compile(
    r"(?P<num>\d+(?:\.\d*)?|\.\d+)"
    r"|(?P<cmd>\\[a-zA-Z]+|\\[^a-zA-Z\s])"
    r"|(?P<letter>[a-zA-Z])"
    r"|(?P<op>[-+*/^_!()\[\]{}|])"
    r"|(?P<space>\s+)"
)

_FUNCTIONS = {
    "sin": sympy.sin,
    "cos": sympy.cos,
    "tan": sympy.tan,
    "cot": sympy.cot,
    "sec": sympy.sec,
    "csc": sympy.csc,
    "arcsin": sympy.asin,
    "arccos": sympy.acos,
    "arctan": sympy.atan,
    "sinh": sympy.sinh,
    "cosh": sympy.cosh,
    "tanh": sympy.tanh,
    "exp": sympy.exp,
    "ln": sympy.log,
    "log": sympy.log,
}
_INVERSES = {"sin": "arcsin", "cos": "arccos", "tan": "arctan"}
_GREEK = {
    "alpha", "beta", "gamma", "delta", "epsilon", "varepsilon", "zeta", "eta", "theta",
    "vartheta", "iota", "kappa", "lambda", "mu", "nu", "xi", "rho", "sigma", "tau", "upsilon",
    "phi", "varphi", "chi", "psi", "omega", "Gamma", "Delta", "Theta", "Lambda", "Xi", "Sigma",
    "Phi", "Psi", "Omega",
}  # fmt: skip
_FRACTIONS = {"frac", "dfrac", "tfrac", "cfrac"}
_MUL_OPS = {"*", "\\cdot", "\\times", "\\ast"}
_DIV_OPS = {"/", "\\div"}
# Commands that only wrap their argument: the argument is parsed as if the wrapper were absent.
_WRAPPERS = {"mathrm", "mathbf", "mathit", "boldsymbol", "bm", "operatorname", "boxed", "fbox"}


def _tokenize(text: str) -> list[_Tok]:
    tokens: list[_Tok] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN_RE.match(text, pos)
        if m is None:
            raise LatexParseError(f"unexpected character {text[pos]!r} in {text!r}")
        pos = m.end()
        kind = m.lastgroup
        if kind == "space":
            continue
        assert kind is not None
        if kind == "num" and len(m.group()) > MAX_NUMBER_LENGTH:
            raise LatexParseError("numeral too long")
        tokens.append(_Tok(kind, m.group()))
    return tokens


def _magnitude_digits(value: sympy.Expr) -> float:
    """log10 of |value| for a sympy number, without evaluating anything expensive."""
    if value.is_Integer or value.is_Rational:
        p, q = abs(int(value.p)), int(value.q)  # type: ignore[attr-defined]
        return (len(str(p)) if p else 0) - len(str(q)) + 1
    try:
        f = abs(complex(value))
    except (TypeError, ValueError, OverflowError):
        return math.inf
    return math.log10(f) if f > 0 else -math.inf


def _safe_pow(base: sympy.Expr, exp: sympy.Expr) -> sympy.Expr:
    if exp.is_number and not exp.has(sympy.zoo, sympy.nan):
        exp_digits = _magnitude_digits(exp)
        if base.is_number:
            if base.is_Number and abs(base) in (0, 1):
                return sympy.Pow(base, exp)
            base_digits = abs(_magnitude_digits(base))
            # |exp| * log10|base| estimates the size of the result in digits.
            if exp_digits > 6 or 10.0**exp_digits * max(base_digits, 1.0) > MAX_DIGITS:
                raise LatexParseError("power too large to evaluate")
        elif exp_digits > math.log10(MAX_SYMBOLIC_EXPONENT):
            raise LatexParseError("exponent too large")
    return sympy.Pow(base, exp)


def _nth_root(radicand: sympy.Expr, n: int) -> sympy.Expr:
    """The n-th root as a reader of a competition answer means it: real for odd ``n``."""
    if n % 2 == 0:
        return sympy.root(radicand, n)
    if radicand.is_number:
        # \\sqrt[3]{-8} is -2, not sympy's principal complex root.
        return (
            sympy.real_root(radicand, n) if radicand.is_extended_real else sympy.root(radicand, n)
        )
    # An odd root of an exact n-th power, like \\sqrt[3]{8x^3}, is that power's base over the reals.
    candidate = sympy.powdenest(sympy.root(radicand, n), force=True)
    if (
        not any(p.exp.is_Rational and not p.exp.is_Integer for p in candidate.atoms(sympy.Pow))
        and sympy.expand(candidate**n - radicand) == 0
    ):
        return candidate
    return sympy.root(radicand, n)


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.toks = _tokenize(text)
        self.pos = 0
        self.depth = 0
        self.abs_depth = 0

    # -- token helpers -------------------------------------------------------------------------
    def peek(self, offset: int = 0) -> _Tok | None:
        i = self.pos + offset
        return self.toks[i] if i < len(self.toks) else None

    def next(self) -> _Tok:
        tok = self.peek()
        if tok is None:
            raise LatexParseError(f"unexpected end of {self.text!r}")
        self.pos += 1
        return tok

    def at(self, text: str) -> bool:
        tok = self.peek()
        return tok is not None and tok.text == text

    def expect(self, text: str) -> None:
        tok = self.next()
        if tok.text != text:
            raise LatexParseError(f"expected {text!r}, got {tok.text!r} in {self.text!r}")

    def enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise LatexParseError("expression nested too deeply")

    # -- grammar -------------------------------------------------------------------------------
    def parse(self) -> sympy.Expr:
        if not self.toks:
            raise LatexParseError("empty expression")
        expr = self.additive()
        if self.peek() is not None:
            raise LatexParseError(f"unexpected {self.peek().text!r} in {self.text!r}")  # type: ignore[union-attr]
        return expr

    def additive(self) -> sympy.Expr:
        terms = [self.product()]
        while True:
            if self.at("+"):
                self.next()
                terms.append(self.product())
            elif self.at("-"):
                self.next()
                terms.append(-self.product())
            else:
                return sympy.Add(*terms)

    def starts_atom(self, tok: _Tok | None) -> bool:
        if tok is None:
            return False
        if tok.kind in ("num", "letter"):
            return True
        if tok.kind == "op":
            return tok.text in ("(", "{") or (tok.text == "|" and self.abs_depth == 0)
        name = tok.text[1:]
        return (
            name in _FUNCTIONS
            or name in _GREEK
            or name in _FRACTIONS
            or name in _WRAPPERS
            or name in ("sqrt", "pi", "infty", "binom", "dbinom", "lfloor", "lceil")
        )

    def product(self) -> sympy.Expr:
        factors = [self.signed()]
        while True:
            tok = self.peek()
            if tok is None:
                break
            if tok.text in _MUL_OPS:
                self.next()
                factors.append(self.signed())
            elif tok.text in _DIV_OPS:
                self.next()
                factors.append(1 / self.signed())
            elif self.starts_atom(tok):
                if tok.kind == "num" and self.toks[self.pos - 1].kind == "num":
                    # "1 000" or "2 3": juxtaposed numerals are not a product anyone writes.
                    raise LatexParseError(f"adjacent numbers in {self.text!r}")
                factors.append(self.power())
            else:
                break
        return sympy.Mul(*factors)

    def signed(self) -> sympy.Expr:
        if self.at("-"):
            self.next()
            return -self.signed()
        if self.at("+"):
            self.next()
            return self.signed()
        return self.power()

    def power(self) -> sympy.Expr:
        base = self.postfix()
        if self.at("^"):
            self.next()
            exp = self.exponent()
            base = _safe_pow(base, exp)
            if self.at("!"):
                raise LatexParseError("ambiguous factorial after a power")
        return base

    def exponent(self) -> sympy.Expr:
        tok = self.peek()
        if tok is not None and tok.text == "-":
            self.next()
            return -self.exponent()
        return self.argument()

    def argument(self) -> sympy.Expr:
        """One TeX argument: ``{...}``, a single digit, a letter, or a command atom."""
        tok = self.peek()
        if tok is None:
            raise LatexParseError(f"missing argument in {self.text!r}")
        if tok.kind == "num":
            self.next()
            if len(tok.text) > 1:
                # TeX reads only the first character: \frac12 is 1/2, x^23 is x^2 * 3.
                self.toks.insert(self.pos, _Tok("num", tok.text[1:]))
            if tok.text[0] == ".":
                raise LatexParseError(f"bad argument in {self.text!r}")
            return sympy.Integer(tok.text[0])
        if tok.text == "{":
            return self.group("{", "}")
        return self.atom()

    def group(self, open_: str, close: str) -> sympy.Expr:
        self.expect(open_)
        self.enter()
        expr = self.additive()
        self.depth -= 1
        self.expect(close)
        return expr

    def postfix(self) -> sympy.Expr:
        expr = self.atom()
        while self.at("!"):
            self.next()
            if expr.is_number and not (expr.is_Integer and 0 <= expr <= MAX_FACTORIAL):
                raise LatexParseError("factorial of a non-integer or too large number")
            expr = sympy.factorial(expr)
        return expr

    def atom(self) -> sympy.Expr:
        tok = self.next()
        if tok.kind == "num":
            return sympy.Rational(tok.text) if "." in tok.text else sympy.Integer(tok.text)
        if tok.kind == "letter":
            return self.symbol(tok.text)
        if tok.text == "(":
            self.pos -= 1
            return self.group("(", ")")
        if tok.text == "[":
            self.pos -= 1
            return self.group("[", "]")
        if tok.text == "{":
            self.pos -= 1
            return self.group("{", "}")
        if tok.text == "|":
            self.abs_depth += 1
            self.enter()
            inner = self.additive()
            self.depth -= 1
            self.abs_depth -= 1
            self.expect("|")
            return sympy.Abs(inner)
        if tok.kind == "cmd":
            return self.command(tok.text[1:])
        raise LatexParseError(f"unexpected {tok.text!r} in {self.text!r}")

    def symbol(self, name: str) -> sympy.Expr:
        if self.at("_"):
            self.next()
            sub = self.subscript_text()
            return sympy.Symbol(f"{name}_{sub}")
        if name == "i":
            return sympy.I
        if name == "e":
            return sympy.E
        return sympy.Symbol(name)

    def subscript_text(self) -> str:
        tok = self.next()
        if tok.text != "{":
            return tok.text.lstrip("\\")
        parts = []
        while not self.at("}"):
            parts.append(self.next().text.lstrip("\\"))
        self.next()
        if not parts:
            raise LatexParseError("empty subscript")
        return "".join(parts)

    def command(self, name: str) -> sympy.Expr:
        if name in _FRACTIONS:
            num = self.argument()
            den = self.argument()
            return num / den
        if name == "sqrt":
            if self.at("["):
                index = self.group("[", "]")
                radicand = self.argument()
                if not (index.is_Integer and 2 <= index <= 100):
                    raise LatexParseError("unsupported root index")
                return _nth_root(radicand, int(index))
            return sympy.sqrt(self.argument())
        if name == "pi":
            return sympy.pi
        if name == "infty":
            return sympy.oo
        if name in _GREEK:
            return self.symbol(name)
        if name in ("binom", "dbinom"):
            n, k = self.argument(), self.argument()
            if n.is_number and (not n.is_Integer or abs(n) > MAX_FACTORIAL):
                raise LatexParseError("binomial argument too large")
            return sympy.binomial(n, k)
        if name in ("lfloor", "lceil"):
            self.enter()
            inner = self.additive()
            self.depth -= 1
            self.expect("\\rfloor" if name == "lfloor" else "\\rceil")
            return sympy.floor(inner) if name == "lfloor" else sympy.ceiling(inner)
        if name in _WRAPPERS:
            return self.argument()
        if name in _FUNCTIONS:
            return self.function(name)
        raise LatexParseError(f"unsupported command \\{name} in {self.text!r}")

    def function(self, name: str) -> sympy.Expr:
        power = None
        base = None
        if name == "log" and self.at("_"):
            self.next()
            base = self.argument()
        if self.at("^"):
            self.next()
            power = self.exponent()
        if self.at("("):
            arg = self.group("(", ")")
        else:
            # \sin 2x means sin(2x): the argument runs over an implicit product of simple atoms,
            # stopping at the next operator or function.
            factors = [self.power()]
            while True:
                tok = self.peek()
                if tok is None or tok.kind not in ("num", "letter"):
                    break
                factors.append(self.power())
            arg = sympy.Mul(*factors)
        if power == -1 and name in _INVERSES:
            # \\sin^{-1} x is arcsin x, not 1/sin x, in every textbook.
            return _FUNCTIONS[_INVERSES[name]](arg)
        value = _FUNCTIONS[name](arg) if base is None else sympy.log(arg, base)
        return value if power is None else _safe_pow(value, power)


def parse_latex_expr(text: str) -> sympy.Expr:
    """Parse one LaTeX expression (no commas, relations or text) into a sympy expression.

    Decimals become exact rationals (``0.5`` is ``1/2``), ``i`` is the imaginary unit, ``e`` is
    Euler's number and every other letter is a plain symbol.

    Args:
        text: A normalised LaTeX expression, e.g. ``"\\frac{\\sqrt{3}}{2}x^2"``.

    Returns:
        The sympy expression.

    Raises:
        LatexParseError: If the text is not a supported expression or is too large to evaluate.
    """
    try:
        return _Parser(text).parse()
    except RecursionError as exc:
        raise LatexParseError("expression nested too deeply") from exc
    except (TypeError, ValueError, ZeroDivisionError, OverflowError) as exc:
        if isinstance(exc, LatexParseError):
            raise
        raise LatexParseError(f"cannot build {text!r}: {exc}") from exc
