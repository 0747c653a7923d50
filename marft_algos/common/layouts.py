"""Episodes → padded tensors in the layouts the advantage estimators take.

Pure data plumbing (no model, no env). Two layouts, both one row per episode:

- **decision layout** ``(E, T)``: one entry per agent decision in the realised order, for the
  action-level estimators (:func:`marft_algos.common.action_level_gae`);
- **token layout** ``(E, L)``: one entry per generated token, decisions concatenated in order, for
  the token-level estimator (:func:`marft_algos.common.token_level_gae`). A decision's reward lands
  on its last token.

Episodes are assumed complete (the collector runs every episode to its end), so the bootstrap value
after the last decision is 0. Truncated episodes (a round limit reached) are treated as terminal too:
there is no next observation to bootstrap from. That is unbiased only when the agents can see how
many rounds are left — an env with a round limit should put the round index in its observations
(as ``relay-v1`` does; the math retry team sees its earlier attempts and ends by termination); otherwise the critic averages first and last attempts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Protocol

import torch
from torch import Tensor

__all__ = [
    "DecisionLayout",
    "TokenLayout",
    "decision_layout",
    "scatter_rows",
    "token_layout",
]


class _Decision(Protocol):
    reward: float
    round_end: bool
    done: bool
    action_ids: list[int]


class _Episode(Protocol):
    decisions: Sequence[_Decision]


class DecisionLayout(NamedTuple):
    """Decision-level tensors, ``(E, T)`` with ``T`` the longest episode in decisions."""

    rewards: Tensor  # (E, T) float
    round_end: Tensor  # (E, T) bool
    dones: Tensor  # (E, T) bool
    valid: Tensor  # (E, T) bool
    index: list[tuple[int, int]]  # type: ignore[assignment]  # flat decision k -> (episode row, column); shadows tuple.index by design


class TokenLayout(NamedTuple):
    """Token-level tensors, ``(E, L)`` with ``L`` the longest episode in tokens."""

    rewards: Tensor  # (E, L) float, the decision's reward on its last token
    action_end: Tensor  # (E, L) bool
    round_end: Tensor  # (E, L) bool
    dones: Tensor  # (E, L) bool
    valid: Tensor  # (E, L) bool
    spans: list[tuple[int, int, int]]  # flat decision k -> (episode row, first column, length)


def decision_layout(episodes: Sequence[_Episode]) -> DecisionLayout:
    """Lay out every episode's decisions as one padded row; decisions flatten in episode order."""
    width = max((len(e.decisions) for e in episodes), default=0)
    shape = (len(episodes), width)
    rewards = torch.zeros(shape)
    round_end = torch.zeros(shape, dtype=torch.bool)
    dones = torch.zeros(shape, dtype=torch.bool)
    valid = torch.zeros(shape, dtype=torch.bool)
    index: list[tuple[int, int]] = []
    for row, episode in enumerate(episodes):
        for col, d in enumerate(episode.decisions):
            rewards[row, col] = d.reward
            round_end[row, col] = d.round_end
            dones[row, col] = d.done
            valid[row, col] = True
            index.append((row, col))
    return DecisionLayout(rewards, round_end, dones, valid, index)


def token_layout(episodes: Sequence[_Episode]) -> TokenLayout:
    """Lay out every episode's generated tokens as one padded row."""
    lengths = []
    for episode in episodes:
        for d in episode.decisions:
            if not d.action_ids:
                raise ValueError(
                    "A decision with no generated tokens cannot be placed in the token layout; "
                    "generation must return at least one token (EOS counts)."
                )
        lengths.append(sum(len(d.action_ids) for d in episode.decisions))
    shape = (len(episodes), max(lengths, default=0))
    rewards = torch.zeros(shape)
    action_end = torch.zeros(shape, dtype=torch.bool)
    round_end = torch.zeros(shape, dtype=torch.bool)
    dones = torch.zeros(shape, dtype=torch.bool)
    valid = torch.zeros(shape, dtype=torch.bool)
    spans: list[tuple[int, int, int]] = []
    for row, episode in enumerate(episodes):
        col = 0
        for d in episode.decisions:
            n = len(d.action_ids)
            last = col + n - 1
            valid[row, col : col + n] = True
            rewards[row, last] = d.reward
            action_end[row, last] = True
            round_end[row, last] = d.round_end
            dones[row, last] = d.done
            spans.append((row, col, n))
            col += n
    return TokenLayout(rewards, action_end, round_end, dones, valid, spans)


def scatter_rows(
    values: Sequence[Tensor], spans: Sequence[tuple[int, int, int]], shape: tuple[int, int]
) -> Tensor:
    """Place per-decision token vectors into a ``(E, L)`` token-layout tensor (inverse of slicing)."""
    out = torch.zeros(shape)
    for v, (row, col, n) in zip(values, spans, strict=True):
        out[row, col : col + n] = v[:n]
    return out
