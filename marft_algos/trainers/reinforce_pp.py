"""REINFORCE++ (Hu 2025, arXiv:2501.03262): REINFORCE with PPO's token-level KL penalty in the
reward, globally normalised advantages and the clipped ratio, for every agent of a team.

A sample is an ``(episode, agent)`` pair: the agent's tokens in the episode, in the order it
wrote them, form one sequence whose reward R is the episode's team return (``reward_source="team"``)
or the agent's own. Per token t, as the paper defines them:

    KL(t) = log π_old(o_t) − log π_ref(o_t)                       (k1; ``kl_estimator``)
    A_t   = R − β · Σ_{i ≥ t} KL(i)                               (the return of r_i = −β·KL(i), R at the end)
    Â_t   = (A_t − mean_batch A) / std_batch A                    (over every token of the batch)

and the loss is PPO's clipped surrogate per token with Â_t (aggregated by ``loss_type``; the
token mean over the batch by default, as OpenRLHF). ``level="action"`` instead trains one
clipped ratio per decision with the return at the decision's first token, normalised over
decisions. ``baseline="group"`` is REINFORCE++-baseline: R minus the mean R of the agent's samples
of the same task before the KL penalty and the normalisation. The batch statistics span every
rank; ``normalize_advantages_per_agent`` takes them over each agent's own entries.

Names and defaults follow OpenRLHF's REINFORCE++ (``--init_kl_coef 0.01`` as ``beta``,
``--kl_estimator k1``, ``--n_samples_per_prompt 1`` as ``num_generations``) and TRL's clip names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch
from torch import Tensor

from marft_algos.common.batch import RolloutBatch
from marft_algos.common.critic_free_advantages import group_advantages, kl_penalized_returns
from marft_algos.rollout.collector import Episode
from marft_algos.trainers.base import TrainerConfig
from marft_algos.trainers.critic_free import CriticFreeLevelConfig, CriticFreeLevelTrainer
from marft_algos.trainers.levels import normalize, normalize_by_agent

__all__ = ["REINFORCEPPConfig", "REINFORCEPPTrainer"]


@dataclass
class REINFORCEPPConfig(CriticFreeLevelConfig):
    """Settings of :class:`REINFORCEPPTrainer` (defaults as OpenRLHF's REINFORCE++)."""

    num_generations: int = 1
    """Episodes per task (1: every task once, the paper's REINFORCE++; >= 2 for baseline='group')."""
    beta: float = 0.01
    """Weight β of the per-token KL penalty in the reward (reference: adapters disabled; policy
    and reference both under the temperature alone, without top-k/top-p); 0: no reference forward
    pass."""
    kl_estimator: Literal["k1", "k2", "k3"] = "k1"
    """Per-token KL estimate in the reward: k1 = log π_old − log π_ref (the paper's), k2, k3."""
    baseline: Literal["none", "group"] = "none"
    """'group': REINFORCE++-baseline, subtract the mean reward of the agent's samples of the task."""
    level: Literal["action", "token"] = "token"
    """One clipped ratio per token (the paper) or per decision (the return at its first token)."""
    normalize_advantages_per_agent: bool = False
    """Take the normalisation's mean and std over each agent's entries instead of the whole batch."""

    min_generations: ClassVar[int] = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.kl_estimator not in ("k1", "k2", "k3"):
            raise ValueError(f"kl_estimator must be 'k1', 'k2' or 'k3', got {self.kl_estimator!r}.")
        if self.baseline not in ("none", "group"):
            raise ValueError(f"baseline must be 'none' or 'group', got {self.baseline!r}.")
        if self.baseline == "group" and self.num_generations < 2:
            raise ValueError(
                "baseline='group' subtracts the mean reward of a task's samples, so a task needs "
                f"several: set num_generations >= 2 (got {self.num_generations}) or baseline='none'."
            )


class REINFORCEPPTrainer(CriticFreeLevelTrainer):
    """REINFORCE++ over any registered env: KL-penalised returns, normalised over the batch."""

    algorithm: ClassVar[str] = "reinforce-pp"
    config_class: ClassVar[type[TrainerConfig]] = REINFORCEPPConfig
    config: REINFORCEPPConfig

    def batch_advantages(
        self, episodes: list[Episode], batch: RolloutBatch
    ) -> tuple[Tensor, dict[str, Any]]:
        c = self.config
        rewards, groups, index = self.batch_samples(episodes, batch)  # (S,), S labels, (N,)
        if c.baseline == "group":
            rewards = group_advantages(rewards, groups, scale_rewards="none")
        mask = batch.action_mask  # (N, T)
        kl, metrics = (
            self.reference_kl(batch, c.kl_estimator)
            if c.beta > 0
            else (torch.zeros(mask.shape), {})
        )
        returns = kl_penalized_returns(
            rewards[index], kl, mask, index.tolist(), beta=c.beta
        )  # (N, T)
        if c.level == "action":
            adv, valid = returns[:, 0], torch.ones(len(batch), dtype=torch.bool)  # (N,)
        else:
            adv, valid = returns, mask
        if c.normalize_advantages_per_agent:
            adv = normalize_by_agent(adv, valid, list(batch.agents), self.dist, self.agents)
        else:
            adv = normalize(adv, valid, self.dist)
        return adv, metrics
