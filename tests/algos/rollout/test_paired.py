"""marft_algos.rollout.paired: paired before/after statistics on the same held-out episodes."""

from __future__ import annotations

import math

import pytest

from marft_algos.rollout.paired import (
    format_paired,
    mcnemar_exact,
    paired_comparison,
    paired_difference,
    paired_outcomes,
)


def test_paired_comparison_matches_a_hand_computation() -> None:
    # 10 episodes: 3 right both times, 4 wrong→right, 1 right→wrong, 2 wrong both times.
    before = [True] * 3 + [False] * 4 + [True] + [False] * 2
    after = [True] * 3 + [True] * 4 + [False] + [False] * 2
    c = paired_comparison(before, after)
    assert (c.n, c.wrong_to_right, c.right_to_wrong) == (10, 4, 1)
    assert (c.before, c.after) == (0.4, 0.7)
    # d = +1 four times, -1 once, 0 five times: mean 0.3, var = 5/10 - 0.09 = 0.41.
    assert c.difference == pytest.approx(0.3)
    assert c.se == pytest.approx(math.sqrt(0.41 / 10))
    # McNemar: 2 * P[Bin(5, 1/2) <= 1] = 2 * (1 + 5) / 32.
    assert c.p_value == pytest.approx(12 / 32)
    assert format_paired(c) == (
        "paired +30.0 ± 20.2 points, 4 wrong→right, 1 right→wrong, McNemar p=0.375 (n=10)"
    )


def test_mcnemar_agrees_with_scipys_binomial_test() -> None:
    stats = pytest.importorskip("scipy.stats")
    for b, c in [(0, 0), (0, 1), (3, 9), (10, 10), (17, 4), (0, 30), (55, 41)]:
        expected = stats.binomtest(min(b, c), b + c, 0.5).pvalue if b + c else 1.0
        assert mcnemar_exact(b, c) == pytest.approx(expected, rel=1e-12), (b, c)


def test_paired_difference_of_rewards_and_bad_input() -> None:
    mean, se = paired_difference([0.0, 1.0, 0.5, 0.5], [1.0, 1.0, 0.0, 1.0])
    # d = 1, 0, -0.5, 0.5: mean 0.25, var = (1 + 0 + 0.25 + 0.25)/4 - 0.0625 = 0.3125.
    assert mean == pytest.approx(0.25)
    assert se == pytest.approx(math.sqrt(0.3125 / 4))
    with pytest.raises(ValueError, match=r"equally long, non-empty.*got 2 and 1"):
        paired_difference([0.0, 1.0], [1.0])
    with pytest.raises(ValueError, match="counts episodes; got -1"):
        mcnemar_exact(-1, 2)


def test_outcomes_are_paired_by_task_not_by_position() -> None:
    before = [
        {"seed": 0, "options": {"index": 0}, "correct": False},
        {"seed": 1, "options": {"index": 1}, "correct": True},
    ]
    after = [
        {"seed": 1, "options": {"index": 1}, "correct": True},
        {"seed": 0, "options": {"index": 0}, "correct": True},
        {"seed": 9, "options": {"index": 9}, "correct": True},  # not evaluated before: unpaired
    ]
    c = paired_outcomes(before, after)
    assert c is not None and (c.n, c.wrong_to_right, c.right_to_wrong) == (2, 1, 0)
    assert paired_outcomes(before, [{"seed": 5, "options": {}, "correct": True}]) is None
