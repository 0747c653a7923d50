"""A seeded generator of small programming problems with unit tests (no data needed).

Each family writes a task text, a reference solution and test inputs from a few random
parameters; the expected outputs come from running the reference (our own code, in this process),
so the tests and the reference always agree. The first test is shown in the task as an example;
all are graded. ``train`` and ``test`` never share a task text.

>>> from marft_envs.code.generator import generate_problems
>>> problem = generate_problems(1, seed=0)[0]
>>> problem.tests[0].startswith("assert ")
True
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from marft_envs.code.problems import CodeDataset, CodeProblem

__all__ = ["BUILTIN_SIZES", "FAMILIES", "Family", "generate_problems", "load_builtin"]

BUILTIN_SIZES: dict[str, int] = {"train": 2000, "test": 200}
"""Default number of problems in each built-in split."""

_SEEDS = {"train": 11, "test": 12}
_TESTS_PER_PROBLEM = 5


@dataclass(frozen=True)
class Family:
    """A kind of problem.

    Attributes:
        name: Family name (``"sum_multiples"``).
        make: ``make(rng) -> (task text, function name, reference code, inputs)``; ``inputs`` is a
            list of argument tuples, one per test.
    """

    name: str
    make: Callable[[np.random.Generator], tuple[str, str, str, list[tuple[Any, ...]]]]


def _ints(rng: np.random.Generator, low: int, high: int, size: int) -> list[int]:
    return [int(v) for v in rng.integers(low, high + 1, size=size)]


def _lists(
    rng: np.random.Generator, n: int, low: int = -20, high: int = 20
) -> list[tuple[Any, ...]]:
    return [(_ints(rng, low, high, int(rng.integers(0, 8))),) for _ in range(n)]


_WORDS = [
    "apple",
    "river",
    "stone",
    "cloud",
    "tiger",
    "lemon",
    "piano",
    "quiet",
    "zebra",
    "orbit",
    "maple",
    "sugar",
    "candle",
    "echo",
]


def _words(rng: np.random.Generator, n: int) -> list[tuple[Any, ...]]:
    return [
        (" ".join(rng.choice(_WORDS, size=int(rng.integers(1, 6))).tolist()),) for _ in range(n)
    ]


def _sum_multiples(rng: np.random.Generator) -> tuple[str, str, str, list[tuple[Any, ...]]]:
    k = int(rng.integers(2, 8))
    text = f"Write a function `sum_multiples(nums)` that returns the sum of the numbers in the list `nums` that are divisible by {k}."
    code = f"def sum_multiples(nums):\n    return sum(x for x in nums if x % {k} == 0)\n"
    return text, "sum_multiples", code, _lists(rng, _TESTS_PER_PROBLEM)


def _count_char(rng: np.random.Generator) -> tuple[str, str, str, list[tuple[Any, ...]]]:
    char = str(rng.choice(list("aeiorstln")))
    text = f"Write a function `count_char(text)` that returns how many times the letter '{char}' occurs in the string `text`."
    code = f"def count_char(text):\n    return text.count({char!r})\n"
    return text, "count_char", code, _words(rng, _TESTS_PER_PROBLEM)


def _clamp(rng: np.random.Generator) -> tuple[str, str, str, list[tuple[Any, ...]]]:
    low = int(rng.integers(-10, 1))
    high = int(rng.integers(1, 11))
    text = (
        f"Write a function `clamp_all(nums)` that returns a new list in which every number of `nums` "
        f"below {low} is replaced by {low} and every number above {high} by {high}."
    )
    code = f"def clamp_all(nums):\n    return [min(max(x, {low}), {high}) for x in nums]\n"
    return text, "clamp_all", code, _lists(rng, _TESTS_PER_PROBLEM)


def _sequence(rng: np.random.Generator) -> tuple[str, str, str, list[tuple[Any, ...]]]:
    start, step = int(rng.integers(-5, 10)), int(rng.integers(2, 6))
    text = (
        f"Write a function `nth_term(n)` that returns the n-th term (n starts at 1) of the sequence "
        f"that starts at {start} and multiplies by {step} at every step."
    )
    code = f"def nth_term(n):\n    return {start} * {step} ** (n - 1)\n"
    return text, "nth_term", code, [(n,) for n in _ints(rng, 1, 12, _TESTS_PER_PROBLEM)]


def _reverse_words(rng: np.random.Generator) -> tuple[str, str, str, list[tuple[Any, ...]]]:
    if rng.random() < 0.5:
        text = "Write a function `reverse_words(text)` that returns the words of `text` (separated by single spaces) in reverse order, joined by single spaces."
        code = "def reverse_words(text):\n    return ' '.join(reversed(text.split(' ')))\n"
    else:
        text = "Write a function `reverse_words(text)` that reverses the letters of every word of `text` (words are separated by single spaces) and keeps the word order."
        code = "def reverse_words(text):\n    return ' '.join(w[::-1] for w in text.split(' '))\n"
    return text, "reverse_words", code, _words(rng, _TESTS_PER_PROBLEM)


def _digit_power_sum(rng: np.random.Generator) -> tuple[str, str, str, list[tuple[Any, ...]]]:
    power = int(rng.integers(1, 4))
    text = f"Write a function `digit_power_sum(n)` that returns the sum of the decimal digits of the non-negative integer `n`, each raised to the power {power}."
    code = f"def digit_power_sum(n):\n    return sum(int(d) ** {power} for d in str(n))\n"
    return text, "digit_power_sum", code, [(n,) for n in _ints(rng, 0, 99999, _TESTS_PER_PROBLEM)]


def _largest_gap(rng: np.random.Generator) -> tuple[str, str, str, list[tuple[Any, ...]]]:
    text = "Write a function `largest_gap(nums)` that returns the largest absolute difference between two neighbouring numbers of the list `nums`, or 0 when it has fewer than two numbers."
    code = "def largest_gap(nums):\n    return max((abs(a - b) for a, b in zip(nums, nums[1:])), default=0)\n"
    return text, "largest_gap", code, _lists(rng, _TESTS_PER_PROBLEM)


def _rotate(rng: np.random.Generator) -> tuple[str, str, str, list[tuple[Any, ...]]]:
    k = int(rng.integers(1, 5))
    text = f"Write a function `rotate_left(nums)` that returns the list `nums` rotated {k} places to the left (the first element moves to the end, {k} times); an empty list stays empty."
    code = f"def rotate_left(nums):\n    if not nums:\n        return []\n    k = {k} % len(nums)\n    return nums[k:] + nums[:k]\n"
    return text, "rotate_left", code, _lists(rng, _TESTS_PER_PROBLEM)


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family("sum_multiples", _sum_multiples),
        Family("count_char", _count_char),
        Family("clamp_all", _clamp),
        Family("nth_term", _sequence),
        Family("reverse_words", _reverse_words),
        Family("digit_power_sum", _digit_power_sum),
        Family("largest_gap", _largest_gap),
        Family("rotate_left", _rotate),
    )
}
"""The built-in problem families by name."""


def _problem(family: Family, rng: np.random.Generator, ident: str) -> CodeProblem:
    text, name, code, inputs = family.make(rng)
    namespace: dict[str, Any] = {}
    exec(compile(code, f"<{family.name}>", "exec"), namespace)  # our own reference code
    tests = []
    for args in inputs:
        call = f"{name}({', '.join(map(repr, args))})"
        tests.append(f"assert {call} == {namespace[name](*args)!r}")
    prompt = f"{text}\nYour code should pass this test:\n```python\n{tests[0]}\n```"
    return CodeProblem(
        prompt=prompt, tests=tuple(tests), reference=code, entry_point=name, id=ident
    )


def _holdout(problem: CodeProblem) -> bool:
    """Whether a task text belongs to the built-in test split (about 1 in 10 texts)."""
    return int(hashlib.sha256(problem.prompt.encode("utf-8")).hexdigest()[:8], 16) % 10 == 0


def generate_problems(
    n: int,
    *,
    seed: int,
    families: Sequence[str] | None = None,
    where: Callable[[CodeProblem], bool] | None = None,
) -> list[CodeProblem]:
    """``n`` problems drawn evenly from ``families`` (default: all) with a seeded generator.

    Args:
        n: Number of problems.
        seed: Seed; the same seed gives the same problems.
        families: Family names (see :data:`FAMILIES`).
        where: Keep only problems for which this returns True (drawing more until there are ``n``).
    """
    names = list(FAMILIES) if families is None else list(families)
    unknown = [f for f in names if f not in FAMILIES]
    if unknown or not names:
        raise ValueError(
            f"Unknown code problem families {unknown or names}; choose from {sorted(FAMILIES)}."
        )
    rng = np.random.default_rng(seed)
    problems: list[CodeProblem] = []
    attempts = 0
    while len(problems) < n:
        attempts += 1
        if attempts > 100 * n + 1000:
            raise RuntimeError(
                f"Could not draw {n} problems that satisfy `where` from families {names}."
            )
        family = FAMILIES[names[len(problems) % len(names)]]
        problem = _problem(family, rng, f"gen-{seed}-{len(problems)}")
        if where is None or where(problem):
            problems.append(problem)
    return problems


@functools.lru_cache(maxsize=8)
def _builtin(split: str, n: int, families: tuple[str, ...] | None) -> tuple[CodeProblem, ...]:
    def keep(p: CodeProblem) -> bool:
        return _holdout(p) == (split == "test")

    return tuple(generate_problems(n, seed=_SEEDS[split], families=families, where=keep))


def load_builtin(
    split: str = "train", *, size: int | None = None, families: Sequence[str] | None = None
) -> CodeDataset:
    """The built-in generated problem set; ``train`` and ``test`` never share a task text.

    Args:
        split: ``"train"`` (2000 problems by default) or ``"test"`` (200).
        size: Number of problems instead of the default.
        families: Families to include (default: all, evenly).
    """
    if split not in _SEEDS:
        raise ValueError(f"The built-in code dataset has splits {sorted(_SEEDS)}, not {split!r}.")
    n = BUILTIN_SIZES[split] if size is None else size
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"size must be a positive integer, got {size!r}.")
    problems = _builtin(split, n, None if families is None else tuple(families))
    return CodeDataset(problems, name="builtin", split=split)
