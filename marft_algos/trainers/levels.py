"""Action level and token level as two small strategies, chosen once per trainer.

The actor-critic trainers differ by granularity in three places only, and each lives here:

- **values**: one ``V(ô)`` per decision (``(N,)``) or one ``V`` per generated token (``(N, T)``);
- **targets**: action-level GAE over the flattened decision sequence, or token-level GAE over the
  flattened token sequence (:mod:`marft_algos.common.advantages`);
- **objective**: a PPO ratio per action or per token (:class:`~marft_algos.trainers.policy_gradient.Objective`).

Advantage normalisation is shared: over the whole batch, or per agent (each agent's advantages
standardised over its own decisions: steadier when agents see rewards of different scales).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Literal, Protocol

import torch
from torch import Tensor

from marft_algos.common.advantages import action_level_gae, normalize_advantages, token_level_gae
from marft_algos.common.agent_normalization import normalize_advantages_per_agent
from marft_algos.common.batch import RolloutBatch
from marft_algos.common.layouts import decision_layout, scatter_rows, token_layout
from marft_algos.distributed import DistributedContext
from marft_algos.protocols import CriticLike

__all__ = ["ActionLevel", "Level", "TokenLevel", "level_named", "normalize", "normalize_by_agent"]


class GAESettings(Protocol):
    gamma: float
    gae_lambda: float
    gamma_token: float
    lam_token: float
    intra_round_discount: bool


class Level:
    """Granularity of values, advantages and PPO ratios."""

    name: ClassVar[Literal["action", "token"]]

    def values(self, critic: CriticLike, batch: RolloutBatch) -> Tensor:
        """Critic values of the batch (differentiable if the critic is)."""
        raise NotImplementedError

    def targets(
        self, episodes: Sequence[Any], values: Tensor, settings: GAESettings
    ) -> tuple[Tensor, Tensor]:
        """``(advantages, returns)`` shaped like ``values``, for every decision of ``episodes``
        in episode order (the order of :func:`~marft_algos.common.batch.build_rollout_batch`)."""
        raise NotImplementedError

    def mask(self, batch: RolloutBatch) -> Tensor:
        """Valid entries of ``values`` / advantages."""
        raise NotImplementedError

    def units(self, batch: RolloutBatch) -> int:
        """Entries the value loss averages over."""
        return int(self.mask(batch).sum())


class ActionLevel(Level):
    """One value and one PPO ratio per agent decision (paper §4.1.1)."""

    name = "action"

    def values(self, critic: CriticLike, batch: RolloutBatch) -> Tensor:
        return critic.action_values(batch.critic_prompts()).float()  # (N,)

    def targets(
        self, episodes: Sequence[Any], values: Tensor, settings: GAESettings
    ) -> tuple[Tensor, Tensor]:
        layout = decision_layout(episodes)
        rows, cols = (
            (list(x) for x in zip(*layout.index, strict=True)) if layout.index else ([], [])
        )
        grid = torch.zeros(layout.rewards.shape)
        grid[rows, cols] = values.detach().cpu()
        adv, ret = action_level_gae(
            layout.rewards,
            grid,
            layout.round_end,
            layout.dones,
            0.0,
            gamma=settings.gamma,
            lam=settings.gae_lambda,
            valid=layout.valid,
            intra_round_discount=settings.intra_round_discount,
        )
        return adv[rows, cols], ret[rows, cols]

    def mask(self, batch: RolloutBatch) -> Tensor:
        return torch.ones(len(batch), dtype=torch.bool)


class TokenLevel(Level):
    """One value and one PPO ratio per generated token (paper §4.1.2, §4.2.2)."""

    name = "token"

    def values(self, critic: CriticLike, batch: RolloutBatch) -> Tensor:
        width = batch.action_mask.shape[1]
        values = critic.token_values(batch.critic_prompts(), batch.action_lists()).float()
        return values[:, :width]  # (N, T), 0 past each action

    def targets(
        self, episodes: Sequence[Any], values: Tensor, settings: GAESettings
    ) -> tuple[Tensor, Tensor]:
        layout = token_layout(episodes)
        rows = [values[k, :n] for k, (_, _, n) in enumerate(layout.spans)]
        shape = (int(layout.rewards.shape[0]), int(layout.rewards.shape[1]))
        grid = scatter_rows([r.detach().cpu() for r in rows], layout.spans, shape)
        adv, ret = token_level_gae(
            layout.rewards,
            grid,
            layout.action_end,
            layout.round_end,
            layout.dones,
            0.0,
            gamma=settings.gamma,
            lam=settings.gae_lambda,
            gamma_token=settings.gamma_token,
            lam_token=settings.lam_token,
            valid=layout.valid,
            intra_round_discount=settings.intra_round_discount,
        )
        out_adv = torch.zeros_like(values)
        out_ret = torch.zeros_like(values)
        for k, (row, col, n) in enumerate(layout.spans):
            out_adv[k, :n] = adv[row, col : col + n]
            out_ret[k, :n] = ret[row, col : col + n]
        return out_adv, out_ret

    def mask(self, batch: RolloutBatch) -> Tensor:
        return batch.action_mask


_LEVELS: dict[str, Level] = {"action": ActionLevel(), "token": TokenLevel()}


def level_named(name: str) -> Level:
    """The strategy for ``"action"`` or ``"token"``."""
    try:
        return _LEVELS[name]
    except KeyError:
        raise ValueError(f"level must be 'action' or 'token', got {name!r}.") from None


def normalize_by_agent(
    advantages: Tensor,
    mask: Tensor,
    agents: Sequence[str],
    distributed: DistributedContext | None = None,
    all_agents: Sequence[str] | None = None,
    *,
    eps: float = 1e-8,
    unbiased: bool = False,
) -> Tensor:
    """Standardise each agent's advantages over its own valid entries
    (:func:`~marft_algos.common.agent_normalization.normalize_advantages_per_agent`); with
    several processes over every rank's entries of that agent (``all_agents`` fixes the order of
    the collectives)."""
    return normalize_advantages_per_agent(
        advantages,
        agents,
        mask,
        order=all_agents,
        normalize=lambda adv, valid: normalize(adv, valid, distributed, eps=eps, unbiased=unbiased),
    )


def normalize(
    advantages: Tensor,
    mask: Tensor,
    distributed: DistributedContext | None = None,
    *,
    eps: float = 1e-8,
    unbiased: bool = False,
) -> Tensor:
    """:func:`~marft_algos.common.advantages.normalize_advantages` over the valid entries of every
    rank (mean and std of the global batch: population std, or the sample std with
    ``unbiased=True``; ``eps`` added to it). All-equal sets, a set of one among them, give zeros:
    one entry carries no ranking, so it trains on 0 rather than its raw value."""
    if distributed is None or not distributed.enabled:
        adv = normalize_advantages(advantages, mask, eps=eps, unbiased=unbiased)
        return torch.where(mask.bool().expand_as(adv), adv, torch.zeros_like(adv))
    adv = advantages.float()
    valid = mask.bool().expand_as(adv)
    kept = torch.where(valid, adv, torch.zeros_like(adv))
    total, count = distributed.sum([float(kept.sum()), float(valid.sum())])
    if not count:
        return torch.zeros_like(adv)
    mean = total / count
    squares = float(torch.where(valid, (adv - mean) ** 2, torch.zeros_like(adv)).sum())
    (sq,) = distributed.sum([squares])
    (scale,) = distributed.max([float(kept.abs().max()) if adv.numel() else 0.0])
    std = (sq / count) ** 0.5
    if std <= 16 * torch.finfo(adv.dtype).eps * scale:
        return torch.zeros_like(adv)
    if unbiased:
        std = (sq / (count - 1)) ** 0.5
    return torch.where(valid, (adv - mean) / (std + eps), torch.zeros_like(adv))
