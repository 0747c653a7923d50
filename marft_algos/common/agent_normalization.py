"""Advantage normalisation per agent (Dr. MAS): each agent's advantages standardised over its own
entries instead of the whole batch.

With one batch-wide mean and std, an agent whose advantages are larger or more spread (a router
paid on every episode beside a specialist that is graded rarely) sets the scale for all of
them, and the other agents' gradients shrink or swell with it. Per agent k, over its valid
entries E_k:

    Â_i = (A_i − μ_k) / (σ_k + ε),   μ_k = mean_{j ∈ E_k} A_j,   σ_k = std_{j ∈ E_k} A_j

with :func:`~marft_algos.common.advantages.normalize_advantages`'s conventions for each agent's
set: population std (or the sample std), an agent whose entries are all equal (one entry among
them) gets zeros, entries outside the mask are 0.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

import torch
from torch import Tensor

from marft_algos.common.advantages import normalize_advantages

__all__ = ["normalize_advantages_per_agent"]

Normalize = Callable[[Tensor, Tensor], Tensor]
"""Normalises one agent's rows: ``(advantages, mask) -> normalised``, 0 outside the mask."""


def normalize_advantages_per_agent(
    advantages: Tensor,
    agents: Sequence[str],
    mask: Tensor | None = None,
    *,
    eps: float = 1e-8,
    unbiased: bool = False,
    order: Sequence[str] | None = None,
    normalize: Normalize | None = None,
) -> Tensor:
    """Standardise each agent's advantages over its own valid entries.

    Args:
        advantages: ``(N,)`` one per decision, or ``(N, T)`` one per token; row i is ``agents[i]``'s.
        agents: The agent of each row (length N).
        mask: Bool, the shape of ``advantages``: ``True`` where valid (default: all).
        eps: Added to each agent's std.
        unbiased: Each agent's sample std (n − 1) instead of the population std.
        order: The agents to normalise, in this order (default: those in ``agents``, in order of
            first appearance); rows of agents left out are 0. A data-parallel caller passes every
            agent, so its collectives run alike on every rank.
        normalize: Normalises one agent's rows (default:
            :func:`~marft_algos.common.advantages.normalize_advantages` with ``eps`` and
            ``unbiased``); a data-parallel caller passes one whose statistics span every rank.

    Returns:
        Float advantages of the same shape.
    """
    if len(agents) != advantages.shape[0]:
        raise ValueError(
            f"agents names {len(agents)} rows, but advantages has {advantages.shape[0]}; give "
            f"one agent per row."
        )
    valid = torch.ones_like(advantages, dtype=torch.bool) if mask is None else mask.bool()
    per_agent = (
        normalize
        if normalize is not None
        else partial(normalize_advantages, eps=eps, unbiased=unbiased)
    )
    out = torch.zeros_like(advantages, dtype=torch.float32)
    for agent in order if order is not None else dict.fromkeys(agents):
        rows = torch.tensor([a == agent for a in agents], dtype=torch.bool)
        out[rows] = per_agent(advantages[rows], valid[rows])
    return out
