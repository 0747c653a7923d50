"""Math answer grading: is the final answer of a response equivalent to the gold answer?

The pipeline, cheapest first:

1. :func:`extract_answer` takes the last ``\\boxed{}`` (or a short bare answer).
2. :func:`normalize_answer` removes presentation (``\\left``, ``\\!``, ``\\dfrac``, ``$``,
   degrees, percent, units, ...). Equal normalised strings are equal answers: no sympy needed.
3. :func:`parse_answer` reads the structure (scalar, equation, tuple, interval, set, list of
   solutions, matrix, text) and parses each expression with a strict LaTeX parser into sympy.
4. :func:`~marft_envs.math.grading.compare.answers_equal` compares structure first, then values:
   exact rationals directly, other numbers to 40 significant digits, expressions symbolically.
   When the gold answer is a plain number, an answer that restates a computation of the problem
   is no answer, and without the problem text every unevaluated computation is refused
   (:func:`~marft_envs.math.grading.compare.states_the_number`).

The whole call runs under a wall-clock limit (:func:`~marft_envs.math.grading.timeout.time_limit`)
that works in the main thread and in worker threads. Parsed gold answers and comparison results
are cached. See ``docs/grading.md`` for every rule and the measured accuracy.
"""

from __future__ import annotations

import functools
import logging

from marft_envs.math.grading.answers import (
    Answer,
    AnswerParseError,
    Chain,
    Equation,
    Inequality,
    Matrix,
    Scalar,
    Sequence,
    SetBuilder,
    Text,
    Union,
    max_answer_chars,
    parse_structure,
)
from marft_envs.math.grading.compare import answers_equal, states_the_number
from marft_envs.math.grading.extract import extract_answer, last_boxed
from marft_envs.math.grading.latex import LatexParseError, parse_latex_expr
from marft_envs.math.grading.normalize import normalize_answer
from marft_envs.math.grading.timeout import GradingTimeout, time_limit

__all__ = [
    "Answer",
    "AnswerParseError",
    "Chain",
    "Equation",
    "GradingTimeout",
    "Inequality",
    "LatexParseError",
    "Matrix",
    "Scalar",
    "Sequence",
    "SetBuilder",
    "Text",
    "Union",
    "answers_equal",
    "check_gold",
    "extract_answer",
    "grade_answer",
    "last_boxed",
    "normalize_answer",
    "parse_answer",
    "parse_latex_expr",
    "states_the_number",
    "time_limit",
]

logger = logging.getLogger(__name__)

GOLD_CHECK_TIMEOUT_S = 10.0
# Beyond this a response is not scanned at all. Every step runs under the time limit, so the cap
# only bounds single C-level scans (one regular expression pass over the text) and memory.
MAX_RESPONSE_CHARS = 16_000_000


def parse_answer(text: str, *, prefer_list: bool = False) -> Answer:
    """Parse an answer (raw or normalised) into its structured form.

    Args:
        text: The answer, e.g. ``"\\left( 3, \\frac{\\pi}{2} \\right)"``.
        prefer_list: Read ``1,000`` as a list of two numbers rather than one thousand.

    Returns:
        The structured answer.

    Raises:
        ValueError: (:class:`AnswerParseError` or :class:`LatexParseError`) if the text cannot be
            read as an answer.
    """
    return parse_structure(normalize_answer(text), prefer_list=prefer_list)


@functools.lru_cache(maxsize=8192)
def _parse_gold(gold: str) -> Answer:
    return parse_answer(gold)


@functools.lru_cache(maxsize=16384)  # sympy trees are a few kB each; bound the memory
def _parse_pred(normalised: str, prefer_list: bool) -> Answer | None:
    try:
        return parse_structure(normalised, prefer_list=prefer_list)
    except (ValueError, TypeError, ZeroDivisionError, OverflowError, RecursionError):
        return None


@functools.lru_cache(maxsize=65536)
def _grade_normalised(pred: str, gold: str, problem: str | None) -> bool:
    gold_answer = _parse_gold(gold)
    if pred == gold_answer.raw:
        return True
    prefer_list = isinstance(gold_answer, Sequence) and gold_answer.kind == "list"
    parsed = _parse_pred(pred, prefer_list)
    if parsed is None:
        # Words that happen not to parse as math can still match a text answer.
        return isinstance(gold_answer, Text) and answers_equal(gold_answer, Text(pred, ""))
    # A number is asked for: restating the problem's computation is no answer (the rule's doc).
    return states_the_number(gold_answer, parsed, problem) and answers_equal(gold_answer, parsed)


def grade_answer(
    response: str, gold: str, *, timeout: float = 2.0, problem: str | None = None
) -> bool:
    """Whether the final answer in ``response`` is mathematically equivalent to ``gold``.

    Never raises on any response or gold: a response without an answer, an unparsable answer, an unparsable gold answer
    (use :func:`check_gold` at load time to catch those), and a comparison that runs past
    ``timeout`` all grade ``False``.

    Args:
        response: The model response; its answer is found by :func:`extract_answer`.
        gold: The reference answer (LaTeX, without ``\\boxed``).
        timeout: Wall-clock seconds allowed for the whole call (extraction, normalisation,
            parsing, comparison); ``None`` or ``0`` for no limit.
        problem: The problem statement. With it, an unevaluated form of a plain-number gold
            (``2^{10}`` for ``1024``) is right unless it restates a computation of the problem
            ("Compute $2^{10}$."); without it every such form grades ``False``
            (:func:`~marft_envs.math.grading.compare.states_the_number`).

    Returns:
        ``True`` iff the answer is equivalent to the gold answer.

    Raises:
        TypeError: If ``problem`` is neither ``None`` nor a string (a caller's bug).
    """
    if not isinstance(response, str) or not isinstance(gold, str):
        return False
    if problem is not None and not isinstance(problem, str):
        raise TypeError(f"problem must be the problem text (a str) or None, not {problem!r}")
    if len(response) > MAX_RESPONSE_CHARS:
        return False
    try:
        # Everything, extraction included, runs under the limit; every step before sympy is
        # also linear in the response length, so a hostile response cannot stall a rollout.
        with time_limit(timeout):
            pred = extract_answer(response)
            if pred is None or len(pred) > max_answer_chars(pred):
                # Nothing longer is an answer, and the cap bounds every later step's cost.
                return False
            normalised = normalize_answer(pred)
            if not normalised:
                return False
            return _grade_normalised(normalised, gold, problem)
    except GradingTimeout:
        logger.debug("grading timed out after %ss: %.80r vs %.80r", timeout, response, gold)
        return False
    except Exception:  # the grader must never take a rollout down
        logger.debug("grading failed: %.80r vs %.80r", response, gold, exc_info=True)
        return False


def check_gold(gold: str) -> None:
    """Raise if a gold answer cannot be parsed into something comparable.

    Dataset loaders call this at load time, so a gold answer the grader cannot read is an error
    there rather than a silent reward of 0 (or worse) during training.

    Args:
        gold: The reference answer.

    Raises:
        ValueError: Naming the gold answer and the reason, when it cannot be parsed.
    """
    if not isinstance(gold, str) or not gold.strip():
        raise ValueError(f"gold answer {gold!r} is empty or not a string; fix or drop the entry")
    try:
        with time_limit(GOLD_CHECK_TIMEOUT_S):
            _parse_gold(gold)
    except GradingTimeout:
        raise ValueError(
            f"gold answer {gold!r} took more than {GOLD_CHECK_TIMEOUT_S}s to parse; "
            "simplify it or drop the entry"
        ) from None
    except (ValueError, TypeError, ZeroDivisionError, OverflowError, RecursionError) as exc:
        raise ValueError(
            f"gold answer {gold!r} cannot be parsed into a comparable value ({exc}); "
            "fix the dataset entry or drop it"
        ) from None
