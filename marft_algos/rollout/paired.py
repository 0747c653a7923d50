"""Paired comparisons of two evaluations on the same held-out episodes.

Held-out episodes are pinned (:func:`~marft_algos.rollout.evaluation.evaluation_requests`), so two
evaluations of one run (before and after training, or two adapter settings) face the same tasks
and each episode's outcomes can be compared pairwise. Pairing removes the spread that comes from
the tasks themselves: the standard error of the difference is that of the per-episode differences
``d_i = after_i - before_i``, ``√(var(d)/n)`` (``var`` over the n episodes, as the binomial
standard errors of :func:`~marft_algos.rollout.evaluation.standard_error`), usually much smaller
than the unpaired ``√(se_before² + se_after²)``.

For right/wrong outcomes, the episodes that changed are counted (wrong→right, right→wrong) and
McNemar's exact test asks whether the two counts differ by more than chance: the two-sided binomial
test of ``min(b, c)`` among the ``b + c`` changed episodes with probability 1/2.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "PairedComparison",
    "episode_key",
    "format_paired",
    "mcnemar_exact",
    "paired_comparison",
    "paired_difference",
    "paired_outcomes",
]


def mcnemar_exact(wrong_to_right: int, right_to_wrong: int) -> float:
    """McNemar's exact two-sided p-value: ``min(1, 2 P[X <= min(b, c)])`` for ``X ~ Bin(b + c, 1/2)``
    (1 when no episode changed)."""
    if wrong_to_right < 0 or right_to_wrong < 0:
        raise ValueError(
            f"McNemar's test counts episodes; got {wrong_to_right} and {right_to_wrong}."
        )
    m = wrong_to_right + right_to_wrong
    k = min(wrong_to_right, right_to_wrong)
    if m == 0:
        return 1.0
    tail = sum(math.comb(m, i) for i in range(k + 1))
    return min(1.0, 2 * tail / 2**m)


def paired_difference(before: Sequence[float], after: Sequence[float]) -> tuple[float, float]:
    """Mean of ``after_i - before_i`` and its paired standard error ``√(var(d)/n)``.

    Raises:
        ValueError: The two lists differ in length or are empty.
    """
    if len(before) != len(after) or not before:
        raise ValueError(
            f"A paired difference needs two equally long, non-empty lists of per-episode "
            f"outcomes; got {len(before)} and {len(after)}."
        )
    d = [float(a) - float(b) for b, a in zip(before, after, strict=True)]
    n = len(d)
    mean = sum(d) / n
    var = max(sum(x * x for x in d) / n - mean * mean, 0.0)
    return mean, math.sqrt(var / n)


@dataclass(frozen=True)
class PairedComparison:
    """Right/wrong outcomes of the same episodes in two evaluations.

    Attributes:
        n: Paired episodes.
        before: Accuracy of the first evaluation.
        after: Accuracy of the second.
        difference: ``after - before``.
        se: Paired standard error of ``difference``.
        wrong_to_right: Episodes wrong before and right after.
        right_to_wrong: Episodes right before and wrong after.
        p_value: McNemar's exact two-sided p-value.
    """

    n: int
    before: float
    after: float
    difference: float
    se: float
    wrong_to_right: int
    right_to_wrong: int
    p_value: float

    def as_dict(self, prefix: str) -> dict[str, Any]:
        """The comparison as metrics ``<prefix>/<field>``."""
        return {f"{prefix}/{k}": v for k, v in self.__dict__.items()}


def paired_comparison(before: Sequence[bool], after: Sequence[bool]) -> PairedComparison:
    """Compare per-episode right/wrong outcomes of the same episodes, in the same order."""
    difference, se = paired_difference([float(x) for x in before], [float(x) for x in after])
    n = len(before)
    up = sum(not b and bool(a) for b, a in zip(before, after, strict=True))
    down = sum(bool(b) and not a for b, a in zip(before, after, strict=True))
    return PairedComparison(
        n=n,
        before=sum(map(bool, before)) / n,
        after=sum(map(bool, after)) / n,
        difference=difference,
        se=se,
        wrong_to_right=up,
        right_to_wrong=down,
        p_value=mcnemar_exact(up, down),
    )


def format_paired(c: PairedComparison) -> str:
    """``paired +12.5 ± 4.1 points, 6 wrong→right, 2 right→wrong, McNemar p=0.289 (n=64)``."""
    return (
        f"paired {100 * c.difference:+.1f} ± {100 * c.se:.1f} points, {c.wrong_to_right} "
        f"wrong→right, {c.right_to_wrong} right→wrong, McNemar p={c.p_value:.3g} (n={c.n})"
    )


def episode_key(seed: int, options: Mapping[str, Any] | None) -> str:
    """What makes two episodes the same task: the reset seed and options."""
    return json.dumps([seed, dict(options or {})], sort_keys=True, default=repr)


def paired_outcomes(
    before: Sequence[Mapping[str, Any]], after: Sequence[Mapping[str, Any]]
) -> PairedComparison | None:
    """Pair two evaluations' per-episode outcome rows (``{"seed", "options", "correct"}``, as
    :func:`~marft_algos.rollout.evaluation.episode_outcomes` gives) by episode.

    Returns:
        The comparison over the episodes both evaluated, or None when they share none (different
        held-out episodes cannot be paired).
    """
    first = {episode_key(r["seed"], r.get("options")): bool(r["correct"]) for r in before}
    pairs = [
        (first[k], bool(r["correct"]))
        for r in after
        if (k := episode_key(r["seed"], r.get("options"))) in first
    ]
    if not pairs:
        return None
    return paired_comparison([b for b, _ in pairs], [a for _, a in pairs])
