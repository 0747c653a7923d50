"""The update's padded batch and its minibatches (marft_algos.common.batch)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

from marft_algos.common.batch import build_rollout_batch


@dataclass
class _Decision:
    agent: str
    action_ids: list[int]
    prompt_ids: list[int] = field(default_factory=lambda: [1])
    text: str = "a b"

    @property
    def log_probs(self) -> list[float]:
        return [-1.0] * len(self.action_ids)


@dataclass
class _Episode:
    decisions: list[_Decision]


def _episodes(n: int) -> list[_Episode]:
    # Episode k: k % 2 + 1 decisions, so shares of a split hold different numbers of decisions.
    return [_Episode([_Decision(f"agent{j}", [k, j]) for j in range(k % 2 + 1)]) for k in range(n)]


@pytest.mark.parametrize(("world_size", "num_minibatches"), [(2, 2), (3, 2), (2, 3), (4, 4)])
def test_minibatches_are_the_same_at_any_number_of_processes(world_size, num_minibatches):
    episodes = _episodes(11)
    one = build_rollout_batch(episodes)
    expected = [
        one[index].action_ids.tolist()
        for index in one.minibatch_indices(np.random.default_rng(3), num_minibatches)
    ]
    assert sum(len(m) for m in expected) == len(one) and all(expected)
    merged: list[list] = [[] for _ in range(num_minibatches)]
    start = 0
    for rank in range(world_size):
        n = len(np.array_split(np.arange(len(episodes)), world_size)[rank])
        share = build_rollout_batch(episodes[start : start + n])
        parts = share.minibatch_indices(
            np.random.default_rng(3),
            num_minibatches,
            n,
            first_episode=start,
            total_episodes=len(episodes),
        )
        assert len(parts) == num_minibatches  # every rank takes the same number of steps
        for k, index in enumerate(parts):
            merged[k] += share[index].action_ids.tolist()
        start += n
    assert merged == expected


def test_a_share_outside_the_global_batch_is_refused():
    batch = build_rollout_batch(_episodes(4))
    with pytest.raises(ValueError, match="do not fit in the 5 episodes"):
        batch.minibatch_indices(np.random.default_rng(0), 2, 4, first_episode=2, total_episodes=5)


def _batch_of_widths(prompt_lengths: list[int], action_length: int = 2):
    episodes = [
        _Episode([_Decision("agent0", [7] * action_length, prompt_ids=[1] * n)])
        for n in prompt_lengths
    ]
    return build_rollout_batch(episodes, default_cap=action_length)


def test_chunks_split_by_count_without_a_token_bound():
    batch = _batch_of_widths([3] * 10)
    assert [len(c) for c in batch.chunks(4)] == [3, 3, 2, 2]
    assert [len(c) for c in batch.chunks(20)] == [1] * 10  # never more parts than rows


@pytest.mark.parametrize(
    ("bound", "sizes"),
    [
        (1000, [5, 5]),  # the count (2) already keeps each part under the bound
        (25, [3, 3, 2, 2]),  # 10 rows x width 8 = 80 tokens: 4 parts of at most 3 rows (24)
        (8, [1] * 10),  # one row is already the bound
        (3, [1] * 10),  # a row wider than the bound still gets a part of its own
    ],
)
def test_chunks_split_more_where_a_part_would_pass_the_token_bound(bound, sizes):
    # The widest prompt (6) plus the longest action (2) is the width every part is padded to.
    batch = _batch_of_widths([2, 6, 3, 3, 3, 3, 3, 3, 3, 3])
    parts = list(batch.chunks(2, bound))
    assert [len(c) for c in parts] == sizes
    assert [k for c in parts for k in c.episode.tolist()] == list(range(10))  # order kept
    assert all(len(c) * 8 <= bound for c in parts) or sizes == [1] * 10


def test_split_rows_takes_the_width_of_its_own_rows():
    batch = _batch_of_widths([30, 1, 1, 1, 1])
    # Rows 1-4 alone are 3 tokens wide: 4 rows x 3 = 12 fits one part of a 12-token bound.
    assert [p.tolist() for p in batch.split_rows([1, 2, 3, 4], 1, 12)] == [[1, 2, 3, 4]]
    assert len(batch.split_rows([0, 1, 2, 3, 4], 1, 12)) == 5
    assert batch.split_rows([], 3, 12) == []
