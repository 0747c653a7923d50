"""Edge forms of a number that people and models write, rewritten to the LaTeX the parser reads.

Each rewrite here keeps the value and only changes how it is written; every one is applied by
:func:`~marft_envs.math.grading.normalize.normalize_answer`:

- Unicode vulgar fractions: ``½`` → ``\\frac{1}{2}``, a mixed ``1½`` → ``(1+\\frac{1}{2})``, the
  fraction slash ``1⁄2`` → ``1/2`` (:func:`vulgar_fractions`).
- Superscript digits: ``10⁻³`` → ``10^{-3}`` (:func:`superscripts`).
- Digits grouped by apostrophes: ``1'000`` → ``1000``, only when every group after the first has
  exactly three digits (:data:`APOSTROPHE_GROUPS_RE`).
- Scientific notation written with ``x``, ``X`` or ``*``: ``3.9 x 10^2`` → ``3.9\\times10^2``
  (:data:`SCI_TIMES_RE`).
- TeX's ``{a \\over b}`` → ``{\\frac{a}{b}}`` and ``{n \\choose k}`` → ``{\\binom{n}{k}}``, in the
  group that holds them, as TeX reads them (:func:`tex_over`).
- A number followed by its own spelled-out words in parentheses: ``5 (five)`` → ``5``; words
  that name another number (``5 (six)``) are kept, so the answer does not parse
  (:func:`drop_spelled_out`).
- A mixed number written with a slash, ``1 1/2`` → ``(1+\frac{1}{2})``, only when the fraction is
  proper (:data:`SLASH_MIXED_RE`).
- The words that announce an answer before it, ``Answer: 5``, ``Final answer: 42``,
  ``\text{The answer is } 5``, and markdown bold around the whole answer, ``**5**``
  (:func:`answer_wrappers`).
"""

from __future__ import annotations

import re
import unicodedata

__all__ = [
    "APOSTROPHE_GROUPS_RE",
    "SCI_TIMES_RE",
    "SLASH_MIXED_RE",
    "answer_wrappers",
    "drop_spelled_out",
    "number_forms",
    "spelled_number",
    "superscripts",
    "tex_over",
    "vulgar_fractions",
]


def _vulgar_table() -> dict[str, tuple[str, str]]:
    """Each vulgar-fraction character and its numerator and denominator (from Unicode data)."""
    table = {}
    for char in "¼½¾⅐⅑⅒⅓⅔⅕⅖⅗⅘⅙⅚⅛⅜⅝⅞↉":
        # "<fraction> 0031 2044 0032": numerator digits, FRACTION SLASH, denominator digits.
        codes = unicodedata.decomposition(char).split()[1:]
        text = "".join(chr(int(code, 16)) for code in codes)
        numerator, denominator = text.split("\u2044")
        table[char] = (numerator, denominator)
    return table


_VULGAR = _vulgar_table()
_VULGAR_RE = re.compile(rf"(?<![\w.])(\d+)?\s?([{''.join(_VULGAR)}])")
_SUPERSCRIPT = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻", "0123456789+-")
_SUPERSCRIPT_RE = re.compile(r"[⁺⁻]?[⁰¹²³⁴⁵⁶⁷⁸⁹]+")

APOSTROPHE_GROUPS_RE = re.compile(r"(?<![\w.,'’])\d{1,3}(?:['’]\d{3})+(?!\d|['’]\d)")
"""``1'000``, ``12’345’678``: digits grouped by apostrophes (Swiss style) are one number."""

SCI_TIMES_RE = re.compile(
    r"(?<![\w.])(?:(\d+(?:\.\d+)?)(?:\s*(?:\*|\\ast)\s*|\s+[xX]\s+)|(\d+\.\d+)[xX])(?=10\s*\^)"
)
"""``3.9 x 10^2``, ``3.9x10^2``, ``3.9*10^{-3}``: a number times a power of ten written with
``x`` or ``*``. A glued ``x`` needs a decimal point before it: ``2x10^3`` may be a product with
the variable ``x``."""


SLASH_MIXED_RE = re.compile(r"(?<![\w^_.}\\/])(?<!\d\s)(\d+)\s+(\d+)\s*/\s*(\d+)(?![\w/.^])")
"""``1 1/2``, ``-2 3/4``: a whole number, a space and a proper fraction (numerator below the
denominator) is a mixed number, as ``3\\frac12`` is; ``1 3/2`` is left as written."""


def _slash_mixed(m: re.Match[str]) -> str:
    whole, numerator, denominator = m.groups()
    if not 0 < int(numerator) < int(denominator):
        return m.group()
    return f"({whole}+\\frac{{{numerator}}}{{{denominator}}})"


_ANNOUNCED = r"(?:the\s+)?(?:final\s+)?answer(?![a-zA-Z])(?:\s+is(?![a-zA-Z]))?\s*:?"
_ANNOUNCED_RE = re.compile(
    rf"\s*(?:\\(?:text|textbf|textrm|mbox|mathrm)\s*\{{\s*{_ANNOUNCED}\s*\}}|{_ANNOUNCED})\s*",
    re.IGNORECASE,
)
_BOLD_RE = re.compile(r"\s*\*\*([^*]+)\*\*\s*")


def answer_wrappers(text: str) -> str:
    """The answer without markdown bold around all of it (``**5**``) and without the words that
    announce it at its start (``Answer: 5``, ``The final answer is 5``, ``\\text{Answer: } 5``);
    those words alone are left as written.

    Args:
        text: An answer.

    Returns:
        What the wrappers held.
    """
    bold = _BOLD_RE.fullmatch(text)
    if bold is not None:
        text = bold.group(1)
    announced = _ANNOUNCED_RE.match(text)
    if announced is not None and text[announced.end() :].strip():
        text = text[announced.end() :]
    return text


def number_forms(text: str) -> str:
    """Apply the rewrites of single numbers: vulgar fractions, superscripts, apostrophe groups,
    scientific notation with ``x`` or ``*`` and mixed numbers with a slash.

    Args:
        text: An answer, with its Unicode symbols not yet rewritten.

    Returns:
        The answer with those forms in LaTeX.
    """
    text = superscripts(vulgar_fractions(text))
    text = APOSTROPHE_GROUPS_RE.sub(lambda m: re.sub(r"\D", "", m.group()), text)
    text = SCI_TIMES_RE.sub(lambda m: f"{m.group(1) or m.group(2)}\\times", text)
    return SLASH_MIXED_RE.sub(_slash_mixed, text)


def vulgar_fractions(text: str) -> str:
    """Rewrite ``½`` to ``\\frac{1}{2}``, a mixed ``1½`` (or ``1 ½``) to ``(1+\\frac{1}{2})``
    and the fraction slash ``⁄`` to ``/``.

    Args:
        text: An answer.

    Returns:
        The answer with every vulgar-fraction character spelled in LaTeX.
    """

    def rewrite(m: re.Match[str]) -> str:
        numerator, denominator = _VULGAR[m.group(2)]
        fraction = f"\\frac{{{numerator}}}{{{denominator}}}"
        if m.group(1) is not None:
            return f"({m.group(1)}+{fraction})"
        before = text[: m.start()].rstrip()[-1:]
        return f"{{{fraction}}}" if before in ("^", "_") else fraction

    return _VULGAR_RE.sub(rewrite, text).replace("\u2044", "/")


def superscripts(text: str) -> str:
    """Rewrite superscript digits (``10⁻³``, ``x²``) as a power: ``10^{-3}``, ``x^{2}``."""
    return _SUPERSCRIPT_RE.sub(lambda m: "^{" + m.group().translate(_SUPERSCRIPT) + "}", text)


def _group_bounds(text: str, at: int) -> tuple[int, int]:
    """The innermost ``{...}`` group around index ``at``: the indices just inside its braces
    (the whole text when no group holds it; ``(-1, -1)`` when the braces do not balance)."""
    depth, start = 0, 0
    for i in range(at - 1, -1, -1):
        if text[i] in "{}" and (i == 0 or text[i - 1] != "\\"):
            depth += 1 if text[i] == "}" else -1
            if depth < 0:
                start = i + 1
                break
    depth, end = 0, len(text)
    for i in range(at, len(text)):
        if text[i] in "{}" and text[i - 1] != "\\":
            depth += 1 if text[i] == "{" else -1
            if depth < 0:
                end = i
                break
    if (start == 0) != (end == len(text)):
        return -1, -1
    return start, end


_OVER_RE = re.compile(r"\\(over|choose)(?![a-zA-Z])")


def tex_over(text: str) -> str:
    """Rewrite TeX's infix ``\\over`` and ``\\choose`` as ``\\frac`` and ``\\binom``.

    As in TeX, the operator splits the innermost group that holds it: ``{1 \\over 2}`` is
    ``{\\frac{1}{2}}``, and without braces the whole answer is split. A group with two of them is
    an error in TeX and is left as written (it does not parse).

    Args:
        text: An answer.

    Returns:
        The answer with each ``\\over``/``\\choose`` replaced.
    """
    for _ in range(text.count("\\over") + text.count("\\choose")):
        m = _OVER_RE.search(text)
        if m is None:
            break
        start, end = _group_bounds(text, m.start())
        if start < 0 or len(_OVER_RE.findall(text, start, end)) > 1:
            break
        command = "\\frac" if m.group(1) == "over" else "\\binom"
        numerator, denominator = text[start : m.start()].strip(), text[m.end() : end].strip()
        text = f"{text[:start]}{command}{{{numerator}}}{{{denominator}}}{text[end:]}"
    return text


_UNITS = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen"
_UNITS += " fifteen sixteen seventeen eighteen nineteen"
_SMALL = {word: value for value, word in enumerate(_UNITS.split())}
_TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70}
_TENS |= {"eighty": 80, "ninety": 90}
_SCALES = {"thousand": 10**3, "million": 10**6, "billion": 10**9, "trillion": 10**12}


def spelled_number(words: str) -> int | None:
    """The integer that English ``words`` spell (``"one hundred and twenty-five"`` → 125).

    Args:
        words: The words; hyphens, ``and`` and a leading ``minus``/``negative`` are allowed.

    Returns:
        The integer, or ``None`` when the words do not spell one.
    """
    tokens = words.lower().replace("-", " ").split()
    sign = 1
    if tokens and tokens[0] in ("minus", "negative"):
        sign, tokens = -1, tokens[1:]
    tokens = [t for t in tokens if t != "and"]
    if not tokens:
        return None
    total = current = 0
    last_scale = 10**15
    for token in tokens:
        if token in _SMALL or token in _TENS:
            value = _SMALL.get(token, _TENS.get(token, 0))
            if current % 100 and (value >= 10 or current % 10 or current % 100 < 20):
                return None  # "five six", "twenty thirty", "twelve three": not one number
            current += value
        elif token == "hundred":
            if not 0 < current < 10:
                return None
            current *= 100
        elif token in _SCALES:
            scale = _SCALES[token]
            if current == 0 or scale >= last_scale:
                return None
            total, current, last_scale = total + current * scale, 0, scale
        else:
            return None
    return sign * (total + current)


_SPELLED_RE = re.compile(
    r"(?<![\w.,^_])(-?\d{1,3}(?:,\d{3})+|-?\d+)\s*\(\s*(?:\\(?:text|textrm|mbox)\s*\{)?\s*([a-zA-Z][a-zA-Z\s-]*?)"
    r"\s*\}?\s*\)"
)


_WORDS_FIRST_RE = re.compile(
    r"\s*(?:\\(?:text|textrm|mbox)\s*\{)?\s*([a-zA-Z][a-zA-Z\s-]*?)\s*\}?\s*\(\s*(-?\d+)\s*\)\s*"
)


def drop_spelled_out(text: str) -> str:
    """Drop words in parentheses that spell the number just before them: ``5 (five)`` → ``5``;
    an answer that is words and their number in parentheses, ``five (5)``, is the number.

    Words that spell another number, or none, are kept as written (``5 (six)``), so the answer
    does not parse and is not paid.

    Args:
        text: An answer.

    Returns:
        The answer without the redundant spelled-out words.
    """

    def rewrite(m: re.Match[str]) -> str:
        return (
            m.group(1)
            if spelled_number(m.group(2)) == int(m.group(1).replace(",", ""))
            else m.group()
        )

    first = _WORDS_FIRST_RE.fullmatch(text)  # five (5): the whole answer
    if first is not None and spelled_number(first.group(1)) == int(first.group(2)):
        return first.group(2)
    return _SPELLED_RE.sub(rewrite, text)
