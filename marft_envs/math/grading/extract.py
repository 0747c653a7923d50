"""Find the final answer in a model response."""

from __future__ import annotations

import re

__all__ = ["MAX_BARE_ANSWER_CHARS", "MAX_BARE_PROSE_WORDS", "extract_answer", "last_boxed"]

# A response without a box counts as a bare answer only when it is short and not prose.
MAX_BARE_ANSWER_CHARS = 80
MAX_BARE_PROSE_WORDS = 2

_BOX_RE = re.compile(r"\\(?:boxed|fbox)(?![a-zA-Z])")
_PROSE_WORD_RE = re.compile(r"(?<![\\a-zA-Z])[a-zA-Z]{2,}")
_TEXT_BLOCK_RE = re.compile(r"\\(?:text|textbf|mbox|mathrm)\s*\{[^{}]*\}")


_BRACE_RE = re.compile(r"\\.|[{}]", re.DOTALL)
_BLANK_RE = re.compile(r"[ \t]*")
# "\boxed 5": TeX takes one token; answers written this way run to whitespace or $, without the
# sentence's closing punctuation ("\boxed 5." is 5).
_BARE_BOX_RE = re.compile(r"[^\s$]+")


def _closing_braces(text: str) -> dict[int, int]:
    """Map the index of every balanced ``{`` to the index of its ``}`` in one linear pass.

    Escaped braces (``\\{``) are skipped. One pass keeps a response full of unbalanced boxes
    linear instead of quadratic.
    """
    closing: dict[int, int] = {}
    stack: list[int] = []
    for m in _BRACE_RE.finditer(text):
        c = m.group()
        if c == "{":
            stack.append(m.start())
        elif c == "}" and stack:
            closing[stack.pop()] = m.start()
    return closing


def last_boxed(text: str) -> str | None:
    """Content of the last top-level ``\\boxed{...}`` / ``\\fbox{...}`` / ``\\boxed x``, stripped.

    The one box reader of the package: model responses (:func:`extract_answer`) and the worked
    solutions of dataset rows without an answer field both go through it. Boxes nested inside a
    box are part of that box; unbalanced and empty boxes are skipped. ``\\boxed 5`` (TeX's
    one-token argument) runs to the next whitespace or ``$``, without trailing ``.``, ``,``, ``;``
    or ``:``. The scan is linear in ``len(text)``: every character is visited a bounded number of
    times, whatever the boxes and braces.

    Args:
        text: Any text.

    Returns:
        The box content without surrounding whitespace, or ``None`` when there is no complete,
        non-empty box.
    """
    found: str | None = None
    pos = 0
    closing: dict[int, int] | None = None
    while True:
        m = _BOX_RE.search(text, pos)
        if m is None:
            return found
        i = _BLANK_RE.match(text, m.end()).end()  # type: ignore[union-attr]
        if i < len(text) and text[i] == "{":
            if closing is None:
                closing = _closing_braces(text)
            close = closing.get(i)
            if close is None:
                pos = m.end()
                continue
            content = text[i + 1 : close].strip()
            if content:  # an empty box is no answer; keep the last real one
                found = content
            pos = close + 1
            continue
        token = _BARE_BOX_RE.match(text, i)
        if token is None:
            pos = m.end()
            continue
        if _BOX_RE.match(text, i):
            pos = i  # "\\boxed \\boxed{3}": the inner box is the answer
            continue
        content = token.group().rstrip(".,;:")
        if content:
            found = content
        pos = token.end()


def extract_answer(response: str) -> str | None:
    """The final answer of a response.

    Rules, in order:

    1. The content of the last top-level, non-empty ``\\boxed{}`` (or ``\\fbox{}``, or
       ``\\boxed x``), with nested braces handled.
    2. Without a box, the whole response when it is a bare answer: at most
       ``MAX_BARE_ANSWER_CHARS`` characters on one line, with at most ``MAX_BARE_PROSE_WORDS``
       words of two or more letters outside LaTeX commands and ``\\text{}`` (so ``"42"``,
       ``"x = 3"``, ``"\\frac{1}{2}"`` and ``"5 cm"`` count; ``"The answer is 42"`` does not).
    3. Otherwise ``None``: prose without a box has no extractable final answer.

    Args:
        response: The model's full response.

    Returns:
        The answer text (not normalised), or ``None``.
    """
    if not isinstance(response, str):
        return None
    boxed = last_boxed(response)
    if boxed is not None:
        return boxed
    if _BOX_RE.search(response):
        return None  # a box was attempted (empty or unbalanced): no bare-answer fallback
    bare = response.strip().strip("$").strip()
    bare = re.sub(r"^\\[\[(]|\\[\])]$", "", bare).strip()
    bare = bare.rstrip(".").strip()
    if not bare or len(bare) > MAX_BARE_ANSWER_CHARS or "\n" in bare:
        return None
    words = _PROSE_WORD_RE.findall(_TEXT_BLOCK_RE.sub(" ", bare))
    if len(words) > MAX_BARE_PROSE_WORDS:
        return None
    return bare
