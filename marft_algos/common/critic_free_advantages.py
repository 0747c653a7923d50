"""Critic-free advantages: GRPO's group-relative advantages, RLOO's leave-one-out baseline,
REINFORCE++'s KL-penalised returns, and the mask of groups whose rewards are all equal.

Pure functions on torch tensors. A group is a set of samples of one prompt (``group_ids``: ints,
or hashables such as ``(question, agent)``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from torch import Tensor

__all__ = [
    "ScaleRewards",
    "group_advantages",
    "kl_penalized_returns",
    "leave_one_out_advantages",
    "zero_std_group_mask",
]

ScaleRewards = Literal["group", "batch", "none"]


def _group_index(group_ids: Tensor | Sequence[object], n: int, device: torch.device) -> Tensor:
    """Map arbitrary group labels (ints, or hashables such as ``(question, agent)``) to 0..G-1."""
    if isinstance(group_ids, Tensor):
        ids = group_ids.reshape(-1)
        if ids.numel() != n:
            raise ValueError(f"group_ids has {ids.numel()} entries but rewards has {n}")
        return torch.unique(ids, return_inverse=True)[1].to(device)
    labels = list(group_ids)
    if len(labels) != n:
        raise ValueError(f"group_ids has {len(labels)} entries but rewards has {n}")
    index: dict[object, int] = {}
    return torch.tensor(
        [index.setdefault(g, len(index)) for g in labels], dtype=torch.long, device=device
    )


def _group_stats(rewards: Tensor, inverse: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Per-sample group mean, unbiased group std (0 for singleton groups) and group size."""
    n_groups = int(inverse.max().item()) + 1 if inverse.numel() else 0
    counts = torch.bincount(inverse, minlength=n_groups).to(rewards.dtype)  # (G,)
    sums = torch.zeros(n_groups, dtype=rewards.dtype, device=rewards.device).index_add_(
        0, inverse, rewards
    )
    mean = (sums / counts)[inverse]  # (N,)
    sq = torch.zeros_like(sums).index_add_(0, inverse, (rewards - mean) ** 2)
    var = torch.where(counts > 1, sq / (counts - 1).clamp(min=1), torch.zeros_like(sq))
    return mean, var.sqrt()[inverse], counts[inverse]


def group_advantages(
    rewards: Tensor,
    group_ids: Tensor | Sequence[object],
    *,
    scale_rewards: ScaleRewards = "group",
    eps: float = 1e-4,
) -> Tensor:
    """GRPO group-relative advantages (paper eq. 2), with TRL's ``scale_rewards`` options.

    A_i = (R_i − mean_{g(i)}(R)) / (std + eps), where the mean is always over sample i's group and

    * ``"group"``: std over the group (GRPO);
    * ``"batch"``: std over every reward of the batch;
    * ``"none"``: no division (Dr. GRPO).

    Standard deviations are unbiased (``torch.std``, n − 1), as TRL computes them; a group (or
    batch) of one sample has std 0. A group whose rewards are all equal gets advantage 0 exactly.

    Args:
        rewards: ``(N,)`` scalar reward of each sample.
        group_ids: ``(N,)`` group label of each sample: a tensor of ints, or a sequence of hashable
            labels. For multi-agent envs group per agent, e.g. ``(question_id, agent_id)`` pairs, so
            each agent's samples are normalised within its own group.
        scale_rewards: ``"group"``, ``"batch"`` or ``"none"``.
        eps: added to the std before dividing.

    Returns:
        ``(N,)`` advantages.
    """
    if scale_rewards not in ("group", "batch", "none"):
        raise ValueError(f"scale_rewards must be 'group', 'batch' or 'none', got {scale_rewards!r}")
    r = rewards.reshape(-1).float()
    if r.numel() == 0:
        return r.clone()
    inverse = _group_index(group_ids, r.numel(), r.device)
    mean, std, _ = _group_stats(r, inverse)
    adv = r - mean  # (N,)
    if scale_rewards == "group":
        adv = adv / (std + eps)
    elif scale_rewards == "batch":
        batch_std = r.std() if r.numel() > 1 else torch.zeros((), device=r.device)
        adv = adv / (batch_std + eps)
    return adv


def leave_one_out_advantages(rewards: Tensor, group_ids: Tensor | Sequence[object]) -> Tensor:
    """RLOO advantages (Ahmadian et al. 2024, arXiv:2402.14740; TRL's ``RLOOTrainer``): each sample's reward
    minus the mean reward of the *other* samples of its group.

    A_i = R_i − (Σ_{j ∈ g(i), j ≠ i} R_j) / (K − 1) = K/(K − 1) · (R_i − mean_{g(i)} R), with K the
    size of sample i's group. The baseline never contains R_i itself, so it is an unbiased
    baseline. A group of one sample has no other sample to compare with: its advantage is 0.

    Args:
        rewards: ``(N,)`` scalar reward of each sample.
        group_ids: ``(N,)`` group label of each sample (ints or hashables, e.g. ``(task, agent)``
            pairs so each agent of a team is compared with its own samples only).

    Returns:
        ``(N,)`` advantages.
    """
    r = rewards.reshape(-1).float()
    if r.numel() == 0:
        return r.clone()
    inverse = _group_index(group_ids, r.numel(), r.device)
    n_groups = int(inverse.max().item()) + 1
    sums = torch.zeros(n_groups, dtype=r.dtype, device=r.device).index_add_(0, inverse, r)
    counts = torch.bincount(inverse, minlength=n_groups).to(r.dtype)[inverse]  # (N,)
    others = (sums[inverse] - r) / (counts - 1).clamp(min=1.0)
    return torch.where(counts > 1, r - others, torch.zeros_like(r))


def kl_penalized_returns(
    rewards: Tensor,
    kl: Tensor,
    mask: Tensor,
    sequence_ids: Sequence[object] | None = None,
    *,
    beta: float,
) -> Tensor:
    """REINFORCE++ per-token returns (Hu 2025, arXiv:2501.03262): the sequence's reward minus β times the
    KL penalties of this token and every later token of the sequence.

    A_t = R − β · Σ_{i ≥ t} KL(i), where KL(i) is a per-token estimate of KL(π_old ‖ π_ref) (see
    :func:`~marft_algos.common.log_probs.kl_penalty`). This is the undiscounted return of the
    token-level reward r_i = −β·KL(i), plus R on the sequence's last token (γ = 1, as the paper
    writes it).

    A sequence may span several rows (an agent that acts in several rounds of an episode): rows
    sharing a label in ``sequence_ids`` form one sequence in row order, so a token's return also
    subtracts the penalties of the sequence's later rows. Every row of a sequence must carry the
    same reward R (the episode's return credited to each of the agent's decisions).

    Args:
        rewards: ``(N,)`` reward R of each row's sequence.
        kl: ``(N, T)`` per-token KL penalty (any value on padding: it is masked).
        mask: ``(N, T)`` bool, True on tokens.
        sequence_ids: ``(N,)`` labels joining rows into sequences (default: every row its own).
        beta: Weight β of the KL penalty.

    Returns:
        ``(N, T)`` returns, 0 on padding.
    """
    m = mask.bool()
    pen = torch.where(m, kl.float(), torch.zeros_like(kl, dtype=torch.float32))  # (N, T)
    # Σ_{i ≥ t} within each row: a reversed cumulative sum.
    within = pen.flip(-1).cumsum(-1).flip(-1)  # (N, T)
    row_total = pen.sum(-1)  # (N,)
    later = torch.zeros_like(row_total)  # (N,) penalties of the sequence's later rows
    if sequence_ids is not None:
        labels = list(sequence_ids)
        if len(labels) != pen.shape[0]:
            raise ValueError(
                f"sequence_ids has {len(labels)} entries but kl has {pen.shape[0]} rows"
            )
        running: dict[object, Tensor] = {}
        for k in reversed(range(len(labels))):
            seen = running.get(labels[k])
            if seen is not None:
                later[k] = seen
            running[labels[k]] = row_total[k] + (seen if seen is not None else 0.0)
    out = rewards.reshape(-1, 1).float() - beta * (within + later.unsqueeze(-1))
    return torch.where(m, out, torch.zeros_like(out))


def zero_std_group_mask(rewards: Tensor, group_ids: Tensor | Sequence[object]) -> Tensor:
    """``(N,)`` bool, ``True`` for samples whose group's rewards are all equal.

    Such groups carry no GRPO learning signal; DAPO's dynamic sampling (paper eq. 3) drops them.
    """
    r = rewards.reshape(-1).float()
    if r.numel() == 0:
        return torch.zeros(0, dtype=torch.bool)
    inverse = _group_index(group_ids, r.numel(), r.device)
    n_groups = int(inverse.max().item()) + 1
    lo = torch.full((n_groups,), float("inf"), device=r.device).scatter_reduce(
        0, inverse, r, "amin"
    )
    hi = torch.full((n_groups,), float("-inf"), device=r.device).scatter_reduce(
        0, inverse, r, "amax"
    )
    return (lo == hi)[inverse]
