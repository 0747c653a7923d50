"""Episodes laid out as the advantage estimators take them, against hand-written tensors."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import torch

from marft_algos.common.layouts import decision_layout, scatter_rows, token_layout


@dataclass
class Decision:
    reward: float
    round_end: bool
    done: bool
    action_ids: list[int] = field(default_factory=lambda: [7])


@dataclass
class Episode:
    decisions: list[Decision]


def two_episodes() -> list[Episode]:
    # Episode 0: two rounds of a two-agent chain (3 + 2 tokens, then 1 + 2); episode 1: one
    # decision of 2 tokens.
    return [
        Episode(
            [
                Decision(0.0, False, False, [1, 2, 3]),
                Decision(1.0, True, False, [4, 5]),
                Decision(0.0, False, False, [6]),
                Decision(2.0, True, True, [8, 9]),
            ]
        ),
        Episode([Decision(0.5, True, True, [1, 2])]),
    ]


def test_decision_layout_hand() -> None:
    layout = decision_layout(two_episodes())
    torch.testing.assert_close(layout.rewards, torch.tensor([[0, 1, 0, 2], [0.5, 0, 0, 0]]))
    assert layout.round_end.tolist() == [[False, True, False, True], [True, False, False, False]]
    assert layout.dones.tolist() == [[False, False, False, True], [True, False, False, False]]
    assert layout.valid.tolist() == [[True] * 4, [True, False, False, False]]
    assert layout.index == [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0)]


def test_token_layout_hand() -> None:
    layout = token_layout(two_episodes())
    assert layout.rewards.shape == (2, 8)
    # Each decision's reward and markers sit on its last token.
    torch.testing.assert_close(layout.rewards[0], torch.tensor([0, 0, 0, 0, 1, 0, 0, 2.0]))
    torch.testing.assert_close(layout.rewards[1], torch.tensor([0, 0.5, 0, 0, 0, 0, 0, 0]))
    assert layout.action_end[0].nonzero().flatten().tolist() == [2, 4, 5, 7]
    assert layout.round_end[0].nonzero().flatten().tolist() == [4, 7]
    assert layout.dones.nonzero().tolist() == [[0, 7], [1, 1]]
    assert layout.valid.sum(-1).tolist() == [8, 2]
    assert layout.spans == [(0, 0, 3), (0, 3, 2), (0, 5, 1), (0, 6, 2), (1, 0, 2)]


def test_scatter_rows_inverts_slicing_by_spans() -> None:
    layout = token_layout(two_episodes())
    grid = torch.arange(16, dtype=torch.float32).reshape(2, 8) * layout.valid
    rows = [grid[row, col : col + n] for row, col, n in layout.spans]
    padded = [torch.cat([r, torch.full((3,), -1.0)]) for r in rows]  # only the first n are read
    torch.testing.assert_close(scatter_rows(padded, layout.spans, (2, 8)), grid)


def test_empty_batches_and_empty_actions() -> None:
    assert decision_layout([]).rewards.shape == (0, 0)
    assert token_layout([]).spans == []
    with pytest.raises(ValueError, match="no generated tokens"):
        token_layout([Episode([Decision(1.0, True, True, [])])])
