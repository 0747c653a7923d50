"""RLOO: REINFORCE with a leave-one-out baseline (Ahmadian et al. 2024), for every agent of a team.

Each task runs ``num_generations`` (K) times. A sample is an ``(episode, agent)`` pair whose reward
is the episode's team return (``reward_source="team"``) or the agent's own; with ``beta > 0`` the
KL of the agent's tokens in the episode to the reference policy is subtracted first, summed over
the tokens (TRL's sequence-level penalty):

    R'_i = R_i − β · Σ_t (log π_old(o_t) − log π_ref(o_t))
    A_i  = R'_i − (Σ_{j ≠ i} R'_j) / (K − 1)            over the same agent's samples of the task

and ``normalize_advantages`` optionally standardises A over the batch as TRL does:
(A − mean) / (std + 1e-4) with the sample std (n − 1), or over each agent's samples with
``normalize_advantages_per_agent``. Every decision of the agent
in the episode is trained on A_i (the team's return credited to every decision, as GRPO does):

- ``level="action"`` (TRL's RLOO): one clipped ratio per decision, on the action's log-prob
  (paper eq. 6, optionally divided by its token or word count), averaged over decisions;
- ``level="token"``: one clipped ratio per token, A_i on every token, aggregated by ``loss_type``.

With ``branch`` (and ``beta=0``), A is instead the leave-one-out advantage among the decision's
siblings in the branch tree (docs/maths.md, "Branched advantages"), then normalised as above over
the decisions.

Knob names follow TRL's ``RLOOConfig``: ``num_generations`` (K, default 2), ``beta`` (0.05),
``epsilon``, ``epsilon_high``, ``num_iterations``, ``normalize_advantages`` (False).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch
from torch import Tensor

from marft_algos.common.batch import RolloutBatch
from marft_algos.common.critic_free_advantages import leave_one_out_advantages
from marft_algos.rollout.collector import Episode
from marft_algos.trainers.base import TrainerConfig
from marft_algos.trainers.branched import batch_branch_advantages
from marft_algos.trainers.critic_free import CriticFreeLevelConfig, CriticFreeLevelTrainer
from marft_algos.trainers.levels import normalize, normalize_by_agent

__all__ = ["RLOOConfig", "RLOOTrainer"]


@dataclass
class RLOOConfig(CriticFreeLevelConfig):
    """Settings of :class:`RLOOTrainer` (names and defaults as TRL's ``RLOOConfig``)."""

    num_generations: int = 2
    """Episodes per task (K); each sample's baseline is the mean of the other K − 1."""
    beta: float = 0.05
    """Weight of the KL penalty in the reward: β times the sum over the agent's tokens of
    log π_old − log π_ref (reference: adapters disabled; both under the temperature alone, without
    top-k/top-p, as in TRL); 0: no reference forward pass."""
    level: Literal["action", "token"] = "action"
    """One clipped ratio per decision (TRL's RLOO: the whole completion is one action) or per token."""
    normalize_advantages: bool = False
    """Standardise the advantages over the batch (every rank's samples) as TRL's RLOO does:
    (A − mean) / (std + 1e-4), std the sample std (n − 1). An all-equal batch gives zeros."""
    normalize_advantages_per_agent: bool = False
    """With ``normalize_advantages``: take the mean and std over each agent's samples instead of
    the whole batch (Dr. MAS)."""

    branches: ClassVar[bool] = True

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.branch is not None and self.beta > 0:
            raise ValueError(
                f"RLOO's beta={self.beta} subtracts each sample's KL from its reward, but with "
                f"branch the advantages come from the branch tree's team returns; set beta=0 with "
                f"branch (--beta 0), or use GRPO, whose beta is a KL term in the loss."
            )
        if self.normalize_advantages_per_agent and not self.normalize_advantages:
            raise ValueError(
                "normalize_advantages_per_agent=True needs normalize_advantages=True (it chooses "
                "how the advantages are normalised, per agent instead of over the batch); set "
                "normalize_advantages=True, or drop normalize_advantages_per_agent."
            )


class RLOOTrainer(CriticFreeLevelTrainer):
    """REINFORCE leave-one-out over any registered env, each agent against its own samples."""

    algorithm: ClassVar[str] = "rloo"
    config_class: ClassVar[type[TrainerConfig]] = RLOOConfig
    config: RLOOConfig

    def batch_advantages(
        self, episodes: list[Episode], batch: RolloutBatch
    ) -> tuple[Tensor, dict[str, Any]]:
        c = self.config
        if c.branch is not None:  # leave-one-out among siblings from the same state
            adv, stats = batch_branch_advantages(
                episodes, batch, scale_rewards="none", agents=self.agents
            )  # (N,)
            return self._normalized(adv, list(batch.agents)), stats
        rewards, groups, index = self.batch_samples(episodes, batch)  # (S,), S labels, (N,)
        metrics: dict[str, Any] = {}
        if c.beta > 0:
            kl, metrics = self.reference_kl(batch, "k1")  # (N, T)
            per_sample = torch.zeros_like(rewards).index_add_(0, index, kl.sum(-1))  # (S,)
            rewards = rewards - c.beta * per_sample
        adv = leave_one_out_advantages(rewards, groups)  # (S,)
        return self._normalized(adv, [agent for _, agent in groups])[index], metrics

    def _normalized(self, adv: Tensor, agents: list[str]) -> Tensor:
        """``normalize_advantages`` (over every rank's entries, or each agent's) applied to ``adv``."""
        c = self.config
        valid = torch.ones_like(adv, dtype=torch.bool)
        if c.normalize_advantages_per_agent:
            return normalize_by_agent(
                adv, valid, agents, self.dist, self.agents, eps=1e-4, unbiased=True
            )
        if c.normalize_advantages:
            return normalize(adv, valid, self.dist, eps=1e-4, unbiased=True)  # TRL's statistics
        return adv
