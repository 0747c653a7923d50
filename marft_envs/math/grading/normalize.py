"""Cheap string normalisation of a final answer, applied before any parsing.

Everything here is a plain string rewrite: presentation that never changes the value (``\\left``,
thin spaces, ``\\dfrac``, dollar signs, degree marks, percent signs, units, trailing periods) is
removed so that most equal answers already match as strings and never reach sympy.
"""

from __future__ import annotations

import re
from fractions import Fraction

from marft_envs.math.grading.forms import (
    answer_wrappers,
    drop_spelled_out,
    number_forms,
    spelled_number,
    tex_over,
)

__all__ = [
    "FILLER_PHRASES",
    "UNIT_WORDS",
    "VALUE_WORDS",
    "droppable_words",
    "normalize_answer",
    "strip_text_units",
    "text_key",
    "unwrap_text",
]

# What may follow a number and be dropped: units, counted things, and a few filler phrases. The
# list is an allow-list on purpose: a word it does not name ("thousand", "squared", "th", "not")
# may change or void the value, so an answer ending in it is never reduced to its number.
# Single letters are excluded too: "5 m" could be 5m, a product with a variable.
_UNIT_WORDS_TEXT = """
    cm mm km meter meters metre metres centimeter centimeters kilometer kilometers millimeter
    millimeters in inch inches ft foot feet yd yard yards mi mile miles
    sq square cubic unit units per
    deg degree degrees radian radians
    dollar dollars cent cents usd eur euro euros gbp yen
    sec second seconds min minute minutes hr hrs hour hours day days week weeks month months
    year years
    gram grams kg kilogram kilograms lb lbs pound pounds oz ounce ounces
    liter liters litre litres ml gallon gallons
    mph kph
    percent
    people persons students ways points times
    apples oranges marbles cookies candies books pages pens pencils stickers shells eggs coins cards
    balls boxes
    bags tickets cars trees chairs tables handshakes games matches dogs cats
"""
UNIT_WORDS = frozenset(_UNIT_WORDS_TEXT.split())
_UNIT_MODIFIERS = frozenset({"sq", "square", "cubic", "per"})
"""Words dropped after a number: units and counted things (``5 \\text{ cm}``, ``12 apples``)."""

FILLER_PHRASES: tuple[str, ...] = (
    "is the final answer",
    "is the answer",
    "in total",
    "in all",
    "total",
    "altogether",
    "each",
    "exactly",
)
"""Phrases that end an answer without touching its value (``12 \\text{ apples in total}``)."""

_VALUE_WORDS_TEXT = """
    hundred hundreds thousand thousands million millions billion billions trillion dozen dozens
    score gross half halves quarter quarters third thirds double twice triple thrice
    squared cubed power powers factorial th st nd rd first fifth tenth
    zero one two three four five six seven eight nine ten eleven twelve twenty fifty
    not no non never none nor neither minus negative except wrong incorrect
    less more plus or approximately about roughly nearly almost over under least most
    """
VALUE_WORDS = frozenset(_VALUE_WORDS_TEXT.split())
"""Words that change or void the value of the number before them (``5 \\text{ thousand}``,
``3 \\text{ squared}``, ``7 \\text{ is not the answer}``). None of them is ever dropped; the
set exists so the tests and docs can name them, and it must not meet :data:`UNIT_WORDS`."""

_UNICODE = {
    "−": "-",
    "–": "-",
    "×": "\\times ",
    "·": "\\cdot ",
    "÷": "\\div ",
    "π": "\\pi ",
    "∞": "\\infty ",
    "√": "\\sqrt",
    "°": "^\\circ",
    "≤": "\\le ",
    "≥": "\\ge ",
    "±": "\\pm ",
    "∓": "\\mp ",
    "∪": "\\cup ",
    "\u00a0": " ",
    "€": " ",
    "£": " ",
    "¥": " ",
}
_SPACING_RE = re.compile(r"(?<!\\)\\[,;:! ]|\\q?quad(?![a-zA-Z])|~")
_SIZING_RE = re.compile(r"\\(?:left|right|middle|[bB]igg?[lr]?)(?![a-zA-Z])\.?")
_STYLE_RE = re.compile(r"\\(?:displaystyle|textstyle|scriptstyle|limits)(?![a-zA-Z])")
_DEGREE_RE = re.compile(r"\^\s*\{\s*\\circ\s*\}|\^\s*\\circ|\\circ|\\degree(?![a-zA-Z])")
_PERCENT_RE = re.compile(r"\\?%")
_TEXT_CMD_RE = re.compile(
    r"\\(?:text|textrm|textnormal|textbf|textit|mbox|mathrm|mathbf|mathit)\s*\{"
)
# An empty block (\\text{}, \\mbox{ }) shows nothing: it is dropped, so it cannot turn a
# computation into a text answer that escapes the rules for math.
_EMPTY_TEXT_RE = re.compile(
    r"\\(?:text|textrm|textnormal|textbf|textit|mbox|mathrm|mathbf|mathit)\s*\{\s*\}"
)
_WORDS_RE = re.compile(r"[\sa-zA-Z.]*")
_TRAILING_TEXT_RE = re.compile(
    r"\\(?:text|textrm|textnormal|textbf|textit|mbox|mathrm)\s*\{([\sa-zA-Z.]*)\}"
    r"\s*(?:\^\s*\{?[23]\}?)?\s*$"
)
# 52_8 / 1011_{2}: a numeral written in a base from 2 to 36 (every digit below the base).
_BASE_SUBSCRIPT_RE = re.compile(r"(?<![\w.])(\d+)_(?:\{(\d+)\}|(\d))")
_LEADING_ZERO_RE = re.compile(r"(?<![\d.])\.(\d)")
# 1.5e3 / 2E-4: scientific notation (never a product with e, which would need an operand after).
_SCI_RE = re.compile(r"(?<![a-zA-Z\d.])(\d+(?:\.\d*)?|\.\d+)[eE]([-+]?\d+)(?![\d.a-zA-Z])")
# 1\frac{4}{5} is the mixed number 1 + 4/5 wherever it stands (an integer times a numeric
# fraction is never written that way); not after ^, _, a letter or a digit ("x^2\frac{1}{3}").
# The TeX shorthand counts too: 3\frac12 is 3 + 1/2, never 3 * 1/2 (each argument one digit).
_MIXED_RE = re.compile(r"(?<![\w^_.}\\])(\d+)\s*\\frac\s*(?:\{(\d+)\}|(\d))\s*(?:\{(\d+)\}|(\d))")
# 1 000, 1\ 000, 12~345, 1 000.5: digits grouped by threes with a space are one number (a space
# between two numbers means nothing else in an answer).
# Every group after the first has three digits: "1 000 0000" and "12 1 000" are left alone.
_SEP = r"(?:\\[ ,;:]|~|\s)"
_SPACE_GROUPS_RE = re.compile(
    rf"(?<![\w.,^_])(?<!\d\s)(?<!\d~)(?<!\d\\[ ,;:])\d{{1,3}}(?:{_SEP}\d{{3}})+(?:\.\d+)?"
    rf"(?![\d.]?\d|{_SEP}\d)"
)
# USD 5, EUR 5: a currency code before a number is presentation, like a dollar sign.
_CURRENCY_CODE_RE = re.compile(r"^\s*(?:USD|US\$|EUR|GBP|JPY|CAD|AUD)\s*(?=[-+]?\.?\d)")
# 0.1\overline{6}: a repeating decimal, an exact fraction.
# Digits after the repeating block are not part of it (0.\overline{3}5 is no number), so such a
# numeral is left as written and does not parse.
_REPEATING_RE = re.compile(
    r"(?<![\d.])(\d*)\.(\d*)\\overline\s*\{(\d+)\}(?!\s*(?:[\d.]|\\overline))"
)
_EXPONENT_TAIL_RE = re.compile(r"\s*(?:\^\s*\{?[23]\}?)?\s*$")


def _find_group_end(text: str, open_at: int) -> int:
    """Index just past the ``}`` closing the ``{`` at ``open_at`` (or -1 if unbalanced)."""
    depth = 0
    i = open_at
    while i < len(text):
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return -1


def _replace_text_blocks(text: str, keep: bool) -> str:
    """Unwrap ``\\text{...}``-like blocks.

    With ``keep`` every block is unwrapped. Without it, a block holding only words is kept as it
    is (only trailing unit blocks are removed, by :func:`strip_text_units`) and any other block
    is unwrapped, so ``\\text{5 ways}`` becomes ``5 ways``.
    """
    out = []
    pos = 0
    for m in _TEXT_CMD_RE.finditer(text):
        if m.start() < pos:
            continue
        end = _find_group_end(text, m.end() - 1)
        if end < 0:
            return text
        inner = text[m.end() : end - 1]
        out.append(text[pos : m.start()])
        if keep:
            out.append(inner)
        elif _WORDS_RE.fullmatch(inner):
            out.append(text[m.start() : end])
        else:
            out.append(f" {inner} ")
        pos = end
    out.append(text[pos:])
    return "".join(out)


def _repeating_to_fraction(m: re.Match[str]) -> str:
    whole, fixed, repeat = m.group(1) or "0", m.group(2), m.group(3)
    value = Fraction(int(whole)) + (
        Fraction(int(fixed or "0")) + Fraction(int(repeat), 10 ** len(repeat) - 1)
    ) / 10 ** len(fixed)
    return f"\\frac{{{value.numerator}}}{{{value.denominator}}}"


def _mixed_number(m: re.Match[str]) -> str:
    whole, numerator, denominator = m.group(1), m.group(2) or m.group(3), m.group(4) or m.group(5)
    return f"({whole}+\\frac{{{numerator}}}{{{denominator}}})"


def _base_numeral(m: re.Match[str]) -> str:
    digits, base = m.group(1), int(m.group(2) or m.group(3))
    if 2 <= base <= 36 and all(int(d) < base for d in digits):
        return digits
    return m.group()  # 5_{1000} is no numeral in any base: left as written, it does not parse


def droppable_words(words: str) -> bool:
    """Whether trailing ``words`` after a number are presentation only (units, counts, filler).

    True when, after one trailing :data:`FILLER_PHRASES` entry is removed, every word left is in
    :data:`UNIT_WORDS`. Anything else (a multiplier, a power, an ordinal, a negation, an unknown
    word) may change the value and is kept, so the answer never reduces to its bare number.

    Args:
        words: The words, e.g. ``" square units"`` or ``"thousand"``.

    Returns:
        Whether they can be dropped without changing the value.
    """
    text = " ".join(words.replace(".", " ").lower().split())
    for phrase in FILLER_PHRASES:
        if text == phrase or text.endswith(" " + phrase):
            text = text[: -len(phrase)].strip()
            break
    words_left = text.split()
    if words_left and words_left[-1] in _UNIT_MODIFIERS:
        return False  # "3 square" may mean 3 squared; "square" is a unit only before one
    if "times" in words_left[:-1]:
        return False  # "5 ways times ways" multiplies; "times" counts only as the last word
    return all(word in UNIT_WORDS for word in words_left)


def _strip_trailing_words(text: str) -> str | None:
    """``text`` without its longest droppable run of bare trailing words, or ``None``.

    The run may end in ``^2``/``^3`` and must follow a digit, ``}``, ``.`` or a space, so
    ``"2x cm"`` loses ``cm`` but never the ``x`` of ``2x``.
    """
    end = _EXPONENT_TAIL_RE.search(text).start()  # type: ignore[union-attr]
    starts = []
    i = end
    while True:
        j = i
        while j > 0 and text[j - 1] in " \t.":
            j -= 1
        k = j
        while k > 0 and text[k - 1].isascii() and text[k - 1].isalpha():
            k -= 1
        if k == j or (k > 0 and text[k - 1] == "\\"):
            break  # no word, or the name of a command
        starts.append(k)
        i = k
    for start in reversed(starts):  # longest run first: "12 apples in total"
        if start == 0 or text[start - 1] not in "0123456789}. \t":
            continue
        if droppable_words(text[start:end]):
            return text[:start].rstrip()
        if not text[start - 1].isdigit():
            # Words set apart from the math are one phrase, dropped whole or kept whole: without
            # this, "5 ways times ways" lost its words one by one down to 5. A word glued to a
            # digit ("2x cm") is math, so the run after it may still be a unit.
            return None
    return None


def strip_text_units(text: str) -> str:
    """Remove trailing unit words and unit ``\\text{}`` blocks when math remains.

    ``"5 \\text{ cm}^2"`` becomes ``"5"``, but ``"\\text{Evelyn}"`` is kept as it is (nothing
    would remain), so text answers stay comparable as text, and ``"5 \\text{ thousand}"`` is kept
    as it is (see :func:`droppable_words`).

    Args:
        text: A normalised answer.

    Returns:
        The answer without units, or ``text`` unchanged when it is only words.
    """
    stripped = _replace_text_blocks(text, keep=False).strip()
    while True:
        # Only trailing words are units: "\\text{not } 3" must not become "3".
        m = _TRAILING_TEXT_RE.search(stripped)
        if m is not None and m.start() > 0 and droppable_words(m.group(1)):
            stripped = stripped[: m.start()].rstrip()
            continue
        shorter = _strip_trailing_words(stripped)
        if shorter is None:
            break
        stripped = shorter
    if not stripped or not re.search(r"[\d\\]", stripped):
        return text.strip()
    return stripped


def normalize_answer(text: str) -> str:
    """Canonical string form of an answer: presentation removed, value untouched.

    Removes dollar signs and math delimiters, ``\\left``/``\\right`` and sizing commands, spacing
    commands (``\\!``, ``\\,``, ``~``, ``\\quad``), empty ``\\text{}`` blocks,
    ``\\displaystyle``, degree marks, percent signs, base subscripts on numerals (``52_8`` → ``52``), ``{,}`` thousands separators,
    spaces between digits grouped by threes (``1 000``), currency signs and leading currency
    codes (``€5``, ``USD 5``), word-only ``\\text{}`` units, trailing unit words and trailing
    periods; unwraps ``\\boxed{}``; rewrites ``\\dfrac``/``\\tfrac`` to ``\\frac``, mixed numbers
    (``3\\frac12``) to ``(3+\\frac{1}{2})``, one number word alone (``five``) to its numeral and
    common Unicode symbols to LaTeX; collapses whitespace.

    Args:
        text: A raw answer, e.g. the content of a ``\\boxed{}``.

    Returns:
        The normalised answer (possibly empty).
    """
    s = answer_wrappers(text.strip())  # **5**, Answer: 5
    s = number_forms(s)  # ½, 10², 1'000, 3.9 x 10^2 (marft_envs.math.grading.forms)
    for src, dst in _UNICODE.items():
        s = s.replace(src, dst)
    s = s.replace("\\$", " ").replace("$", " ")
    s = re.sub(r"(?:\s*(?<!\\)[.;])+\s*$", "", s)  # early too: the rules below anchor at the end
    s = re.sub(r"^\s*\\[\[(]|\\[\])]\s*$", " ", s)
    s = re.sub(r"\\(?:boxed|fbox)\s*\{", "{", s)
    s = _STYLE_RE.sub(" ", s)
    s = _SIZING_RE.sub("", s)
    s = re.sub(r",\\!\s*(?=\d{3})", ",", s)  # 10,\!080 is a thousands separator
    s = re.sub(r"(?<=\d)\\,(?=\d{3}(?!\d))", "", s)  # 3\,000: a thin space groups digits
    s = _SPACE_GROUPS_RE.sub(lambda m: re.sub(r"[^\d.]", "", m.group()), s)
    s = _CURRENCY_CODE_RE.sub("", s)
    s = _SPACING_RE.sub(" ", s)
    s = tex_over(s)  # {1 \\over 2}
    while True:  # \text{\text{}} is empty too once the inner block is gone
        s, dropped = _EMPTY_TEXT_RE.subn(" ", s)
        if not dropped:
            break
    s = re.sub(r"\\[dtc]frac(?![a-zA-Z])", r"\\frac", s)
    s = s.replace("{,}", "")
    s = _SCI_RE.sub(r"\1\\times10^{\2}", s)
    s = _REPEATING_RE.sub(_repeating_to_fraction, s)
    s = re.sub(r"\\mathbb\s*\{?R\}?", r"(-\\infty,\\infty)", s)
    s = _MIXED_RE.sub(_mixed_number, s)
    # "x = 1 or x = 2" lists solutions; the words must become separators before units go.
    s = re.sub(r"\\(?:text|mbox)\s*\{\s*(?:or|and)\s*\}", ",", s)
    if re.search(r"[\d=]", s):
        s = re.sub(r"\s+(?:or|and)\s+", ", ", s)
    s = _DEGREE_RE.sub(" ", s)
    s = _PERCENT_RE.sub(" ", s)
    s = _BASE_SUBSCRIPT_RE.sub(_base_numeral, s)
    s = _LEADING_ZERO_RE.sub(r"0.\1", s)
    s = drop_spelled_out(strip_text_units(s))  # 5 (five)
    s = re.sub(r"\s+", " ", s).strip()
    # Spaces inside brackets never matter; a space after a comma is kept because "1, 500" reads
    # as a list where "1,500" reads as fifteen hundred.
    s = re.sub(r"(?<=[(\[{]) | (?=[)\]},]|\\\})", "", s)
    s = re.sub(r"(?:\s*(?<!\\)[.;])+$", "", s).strip()
    word = re.fullmatch(r"(?:\\(?:text|mbox)\{)?\s*([a-zA-Z][a-zA-Z -]*)\s*\}?", s)
    value = spelled_number(word.group(1).lower()) if word is not None else None
    if value is not None:  # five, twenty-one, one hundred and five
        s = str(value)
    return s


def unwrap_text(text: str) -> str:
    """``text`` with every ``\\text{...}``-like wrapper replaced by its content."""
    return _replace_text_blocks(text, keep=True)


def text_key(text: str) -> str:
    """Comparison key of an answer read as words: ``"\\text{(C)}"`` and ``"c"`` share one."""
    s = _replace_text_blocks(text, keep=True)
    # Other commands stay in the key, so "\\frac{C}{}" never matches the choice "C".
    s = re.sub(r"[\s{}()\[\].,:;'\"`$]", "", s)
    return s.lower()
