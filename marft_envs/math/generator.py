"""A built-in, seeded, procedurally generated math problem set with exact answers.

``make("math-dual-v7")`` must work on a fresh machine with no download, so the default data of the
math environments is generated here. Every problem has an exact answer, written the way the MATH
benchmark writes answers (``\\frac{3}{4}``, ``-7``, ``6\\sqrt{2}``, ``(2,-3)``, ``-3, \\frac{1}{2}``),
and a short worked solution: the intermediate results, one per line, ending in ``\\boxed{answer}``.
A small model can be trained supervised on those solutions, and a "reasoner" agent that states the
intermediate results genuinely helps an "actor" that must give the final answer.

The families of problems (arithmetic, fractions, powers, percent, linear, system, word, quadratic,
and the opt-in digits) are in :mod:`marft_envs.math.families`; this module draws from them, balanced
over families and levels, and keeps problem texts distinct. A problem's ``subject`` is its family
name, so ``dataset.filter(subjects=["fractions"])`` selects one family. Randomness comes only from
a :class:`random.Random` instance seeded by the caller.

A new family is a function ``make(rng, level) -> (problem, answer, steps)`` registered in
:data:`FAMILIES`; it raises :class:`RetryDraw` when the numbers it drew give a degenerate problem.
"""

from __future__ import annotations

import difflib
import random
from collections.abc import Callable, Iterator, Sequence

from marft_envs.math.families import FAMILIES, LEVELS, OPT_IN_FAMILIES, Family, RetryDraw, family
from marft_envs.math.records import MathProblem

__all__ = [
    "FAMILIES",
    "LEVELS",
    "OPT_IN_FAMILIES",
    "Family",
    "RetryDraw",
    "family",
    "generate_problems",
    "iter_problems",
]


def _check_choice(
    levels: Sequence[int], families: Sequence[str] | None
) -> tuple[list[int], list[str]]:
    levels = list(levels)
    bad = [lv for lv in levels if lv not in LEVELS]
    if not levels or bad:
        raise ValueError(f"levels must be a non-empty subset of {LEVELS}, got {levels!r}.")
    names = list(FAMILIES) if families is None else list(families)
    for name in names:
        if family(name) is None:
            known = [*FAMILIES, *OPT_IN_FAMILIES]
            close = difflib.get_close_matches(str(name), known, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise ValueError(f"Unknown problem family {name!r}; known: {sorted(known)}.{hint}")
    if not names:
        raise ValueError("families must name at least one family (or be None for all).")
    return levels, names


def iter_problems(
    *, seed: int, levels: Sequence[int] = LEVELS, families: Sequence[str] | None = None
) -> Iterator[MathProblem]:
    """Yield generated problems forever (duplicates possible), balanced over families and levels.

    Every (family, level) combination appears once per cycle, in an order shuffled per cycle, so
    any prefix of the stream is close to evenly balanced.

    Args:
        seed: Seed of the private :class:`random.Random`; the same seed gives the same stream.
        levels: Difficulty levels to draw from (subset of :data:`LEVELS`).
        families: Family names from :data:`FAMILIES`; ``None`` means all.

    Raises:
        ValueError: Unknown family or level.
    """
    levels, names = _check_choice(levels, families)
    rng = random.Random(seed)
    combos = [(name, level) for name in names for level in levels]
    index = 0
    while True:
        order = combos[:]
        rng.shuffle(order)
        for name, level in order:
            for _ in range(1000):
                try:
                    text, answer, steps = family(name).make(rng, level)  # type: ignore[union-attr]
                    break
                except RetryDraw:
                    continue
            else:  # pragma: no cover - every family succeeds in a handful of draws
                raise RuntimeError(f"family {name!r} level {level} failed to produce a problem")
            solution = "\n".join([*steps, f"\\boxed{{{answer}}}"])
            yield MathProblem(
                text, answer, solution, level=level, subject=name, id=f"gen-{seed}-{index}"
            )
            index += 1


def generate_problems(
    n: int,
    *,
    seed: int,
    levels: Sequence[int] = LEVELS,
    families: Sequence[str] | None = None,
    where: Callable[[MathProblem], bool] | None = None,
) -> list[MathProblem]:
    """Generate ``n`` distinct problems (no two share a problem text), deterministically.

    Args:
        n: Number of problems.
        seed: Seed; the same arguments always give the same list, and the first ``k`` problems of
            ``n > k`` equal the ``k`` problems of a shorter call.
        levels: Difficulty levels (subset of :data:`LEVELS`), drawn evenly.
        families: Family names from :data:`FAMILIES` (``None``: all), drawn evenly.
        where: Keep only problems for which this returns true (used to hold out a test split).

    Returns:
        The problems; ``subject`` is the family name, ``id`` is ``"gen-<seed>-<index>"``.

    Raises:
        ValueError: ``n`` is negative, an unknown family or level, or the chosen families and
            levels cannot produce ``n`` distinct problems.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}.")
    problems: list[MathProblem] = []
    seen: set[str] = set()
    misses = 0
    for problem in iter_problems(seed=seed, levels=levels, families=families):
        if len(problems) >= n:
            break
        if problem.problem in seen or (where is not None and not where(problem)):
            misses += 1
            # A long run of rejects means the requested slice of the problem space is exhausted.
            if misses > 2000 + 20 * n:
                raise ValueError(
                    f"Could only generate {len(problems)} distinct problems of {n} for levels "
                    f"{list(levels)} and families {families}; ask for fewer or widen the choice."
                )
            continue
        seen.add(problem.problem)
        problems.append(problem)
    return problems
