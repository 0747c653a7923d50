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
