"""Grading policy tests: words after a number, the time bound on the whole call, one extractor."""

from __future__ import annotations

import threading
import time

import pytest

from marft_envs.math.grading import extract_answer, grade_answer, last_boxed
from marft_envs.math.grading.normalize import (
    FILLER_PHRASES,
    UNIT_WORDS,
    VALUE_WORDS,
    droppable_words,
    normalize_answer,
)


def boxed(answer: str) -> str:
    return f"The answer is $\\boxed{{{answer}}}$."


# -- words after a number (the table in docs/grading.md) ----------------------------------------

# (answer, gold, expected): each row of the "Words after a number" table, plus the cases of the
# issue that were accepted before (every one of them is a wrong value).
WORD_POLICY = [
    # units and counted things are dropped
    ("5\\text{ cm}", "5", True),
    ("5 \\text{ cm}^2", "5", True),
    ("12 \\text{ square units}", "12", True),
    ("30 \\text{ miles per hour}", "30", True),
    ("12 \\text{ apples}", "12", True),
    ("5 cm", "5", True),
    ("2x cm", "2x", True),
    ("12 apples in total", "12", True),
    ("3 square", "3", False),
    # filler phrases are dropped
    ("3 \\text{ is the answer}", "3", True),
    ("12 \\text{ apples in total}", "12", True),
    ("4 \\text{ each}", "4", True),
    # multipliers
    ("5\\text{ thousand}", "5", False),
    ("5\\text{ million}", "5", False),
    ("5\\text{ hundred}", "5", False),
    ("2\\text{ dozen}", "2", False),
    ("5\\text{ thousand dollars}", "5", False),
    ("\\text{5 thousand}", "5", False),
    ("5 thousand", "5", False),
    # powers and factorials
    ("3\\text{ squared}", "3", False),
    ("3 \\text{ square}", "3", False),
    ("3 \\text{ square feet}", "3", True),
    ("10\\text{ factorial}", "10", False),
    # ordinals
    ("5\\text{th}", "5", False),
    ("5^{\\text{th}}", "5", False),
    # count words
    ("5 \\text{ twelve}", "5", False),
    # negation and hedges
    ("7\\text{ is not the answer}", "7", False),
    ("7 \\text{ or more}", "7", False),
    ("7 \\text{ approximately}", "7", False),
    # unknown words are kept, so the answer is not its number
    ("5\\text{ blorps}", "5", False),
    ("5\\mathrm{ million}", "5", False),
    ("5\\textbf{ million}", "5", False),
]


@pytest.mark.parametrize(
    ("answer", "gold", "expected"), WORD_POLICY, ids=[a for a, _, _ in WORD_POLICY]
)
def test_words_after_a_number(answer: str, gold: str, expected: bool) -> None:
    assert grade_answer(boxed(answer), gold) is expected


@pytest.mark.parametrize("word", sorted(VALUE_WORDS))
def test_no_value_word_is_ever_dropped(word: str) -> None:
    assert not droppable_words(word)
    assert not droppable_words(f"dollars {word}")
    assert grade_answer(boxed(f"5\\text{{ {word}}}"), "5") is False
    assert grade_answer(boxed(f"5 \\text{{ {word} cm}}"), "5") is False
    assert grade_answer(boxed(f"5 {word}"), "5") is False
    assert grade_answer(boxed(f"5 cm {word}"), "5") is False


def test_value_words_meet_neither_units_nor_fillers() -> None:
    assert not VALUE_WORDS & UNIT_WORDS
    assert not VALUE_WORDS & {w for phrase in FILLER_PHRASES for w in phrase.split()}


def test_unit_words_are_dropped_everywhere_a_unit_may_stand() -> None:
    for word in sorted(UNIT_WORDS - {"sq", "square", "cubic", "per"}):
        assert normalize_answer(f"7\\text{{ {word}}}") == "7", word
        assert normalize_answer(f"7\\text{{ square {word}}}") == "7", word


# -- one extractor ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("so $\\boxed 5.$", "5"),
        ("\\boxed 5.", "5"),
        ("\\boxed5", "5"),
        ("\\boxed{ 7 }.", "7"),
        ("\\boxed \\boxed{3}", "3"),
        ("\\boxed{3} then \\boxed{", "3"),
        ("\\boxed{}", None),
        ("\\boxed .", None),
        ("no box", None),
    ],
)
def test_last_boxed(text: str, expected: str | None) -> None:
    assert last_boxed(text) == expected


def test_dataset_rows_use_the_grading_extractor() -> None:
    from marft_envs.math import data

    assert data.last_boxed is last_boxed
    rows = [{"problem": "p", "solution": "So it is \\boxed 5."}]
    assert data.load_dataset(rows)[0].answer == extract_answer("So it is \\boxed 5.") == "5"


# -- the whole call is bounded ------------------------------------------------------------------

LIMIT_S = 1.0
MARGIN_S = 1.0
N = 1_000_000


def _fill(unit: str, tail: str = "") -> str:
    return (unit * ((N - len(tail)) // len(unit)) + tail).ljust(N)


ADVERSARIAL = {
    "repeated-boxed1": _fill("\\boxed1"),
    "repeated-boxed-spaced": _fill("\\boxed 1 "),
    "repeated-boxed-braced": _fill("\\boxed{1}"),
    "repeated-empty-boxes": _fill("\\boxed{}"),
    "unclosed-boxes": _fill("\\boxed{"),
    "unclosed-braces": _fill("{", "\\boxed{2}"),
    "deep-nesting": "\\boxed{" + "{" * ((N - 9) // 2) + "1" + "}" * ((N - 9) // 2) + "}",
    "operator-chain": _fill("1+"),
    "operator-chain-in-box": _fill("x", "\\boxed{" + "1+" * 499 + "1}"),
    "pm-chain-in-box": _fill("x", "\\boxed{1" + "\\pm 1" * 150 + "}"),
    "expensive-simplify": _fill("x", "\\boxed{(a+b+c+d+1)^{40}(a-1)}"),
}


@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
def test_million_character_responses_finish_within_the_limit(name: str) -> None:
    response = ADVERSARIAL[name]
    assert len(response) <= N
    gold = "(a+b+c+d+1)^{40}a-(a+b+c+d+1)^{40}" if name == "expensive-simplify" else "3"
    start = time.perf_counter()
    assert grade_answer(response, gold, timeout=LIMIT_S) is False
    assert time.perf_counter() - start < LIMIT_S + MARGIN_S


def test_million_character_response_is_bounded_in_a_worker_thread() -> None:
    elapsed: list[float] = []

    def work() -> None:
        start = time.perf_counter()
        grade_answer(
            ADVERSARIAL["expensive-simplify"], "(a+b+c+d+1)^{40}a-(a+b+c+d+1)^{40}", timeout=LIMIT_S
        )
        elapsed.append(time.perf_counter() - start)

    worker = threading.Thread(target=work)
    worker.start()
    worker.join(timeout=30)
    assert elapsed and elapsed[0] < LIMIT_S + MARGIN_S


def test_extraction_time_grows_linearly() -> None:
    # The pattern that was quadratic (4.9 s at 100k characters): ten times the input must cost
    # far less than a hundred times the time. CPU time of this thread (best of three), so a load
    # burst on the machine during one measurement cannot skew the ratio.
    small, large = "\\boxed1 x" * 10_000, "\\boxed1 x" * 100_000
    times = []
    for text in (small, large):
        best = float("inf")
        for _ in range(3):
            start = time.thread_time()
            extract_answer(text)
            best = min(best, time.thread_time() - start)
        times.append(best)
    assert times[1] < 30 * times[0] + 0.05
