"""Episodes → padded tensors in the layouts the advantage estimators take.

Pure data plumbing (no model, no env). Two layouts, both one row per episode:

- **decision layout** ``(E, T)``: one entry per agent decision in the realised order, for the
  action-level estimators (:func:`marft_algos.common.action_level_gae`);
- **token layout** ``(E, L)``: one entry per generated token, decisions concatenated in order, for
  the token-level estimator (:func:`marft_algos.common.token_level_gae`). A decision's reward lands
  on its last token. :func:`flatten_action_tokens` lays a per-decision token grid out the same way.

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
    "flatten_action_tokens",
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


def flatten_action_tokens(
    token_mask: Tensor,
    rewards: Tensor,
    round_end: Tensor,
    dones: Tensor,
    valid: Tensor | None = None,
) -> dict[str, Tensor]:
    """Lay a per-decision token grid out as the flat token sequence :func:`token_level_gae` reads.

    Trainers usually store the tokens of decision ``k`` of env ``b`` at ``[b, k, :]`` of a
    ``(B, T, L)`` grid, right-padded to ``L`` tokens. Reshaping that grid to ``(B, T·L)`` gives the
    token sequence in the realised order with pad tokens in between; since padding is transparent to
    the recursion, only the markers need placing: the decision's reward, ``round_end`` and ``dones``
    go on its last real token. Per-token values reshape the same way
    (``values.reshape(B, -1)``) and the advantages back (``adv.reshape(B, T, L)``).

    Args:
        token_mask: ``(B, T, L)`` bool, ``True`` on generated tokens.
        rewards: ``(B, T)`` reward of each decision.
        round_end: ``(B, T)`` bool round ends.
        dones: ``(B, T)`` bool episode ends.
        valid: ``(B, T)`` bool, ``False`` on padded decisions (default: all).

    Returns:
        Dict with ``rewards``, ``action_end``, ``round_end``, ``dones``, ``valid``, each ``(B, T·L)``.

    Raises:
        ValueError: if a valid decision has no token (its reward would have nowhere to land).
    """
    if token_mask.dim() != 3:
        raise ValueError(f"token_mask must be (B, T, L), got {tuple(token_mask.shape)}")
    mask = token_mask.bool()
    batch, steps, length = mask.shape
    dec_valid = (
        torch.ones(batch, steps, dtype=torch.bool, device=mask.device)
        if valid is None
        else valid.bool()
    )
    counts = mask.sum(-1)  # (B, T)
    empty = dec_valid & (counts == 0)
    if empty.any():
        b, k = (int(i) for i in empty.nonzero()[0])
        raise ValueError(
            f"decision {k} of env {b} has no generated token; mark it invalid or keep at least one "
            "token (e.g. the end-of-sequence token) per action"
        )
    mask = mask & dec_valid.unsqueeze(-1)
    # Index of the last real token of each decision: the highest position with mask set.
    positions = torch.arange(length, device=mask.device).expand_as(mask)
    last = torch.where(mask, positions, torch.full_like(positions, -1)).amax(-1)  # (B, T)
    is_last = (positions == last.unsqueeze(-1)) & mask  # (B, T, L)

    def place(x: Tensor) -> Tensor:
        grid = torch.zeros(batch, steps, length, dtype=x.dtype, device=mask.device)
        grid[is_last] = x.unsqueeze(-1).expand(batch, steps, length)[is_last]
        return grid.reshape(batch, -1)

    return {
        "rewards": place(rewards),
        "action_end": is_last.reshape(batch, -1),
        "round_end": place(round_end.bool()),
        "dones": place(dones.bool()),
        "valid": mask.reshape(batch, -1),
    }
