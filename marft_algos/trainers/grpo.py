"""GRPO (paper eq. 2) with DAPO options (eq. 3), for single- and multi-agent envs.

Each iteration samples ``episodes_per_iteration / num_generations`` tasks and runs every task
``num_generations`` times (episodes of a group share their reset seed, so they face the same
problem). Every token of an agent's actions in episode ``i`` gets the group advantage
``(R_i − mean(R)) / std(R)``; in a team, groups are formed per agent, so each agent's samples are
normalised among themselves. The loss is the clipped surrogate per token, optionally plus
``beta`` × the k3 KL to the reference policy (the base model with adapters disabled). No critic.
The sampling, the loop and the data-parallel split are shared with RLOO and REINFORCE++
(:mod:`marft_algos.trainers.critic_free`).

Knob names follow TRL's ``GRPOConfig``: ``num_generations``, ``beta``, ``epsilon``, ``epsilon_high``,
``loss_type``, ``scale_rewards``, ``num_iterations``; defaults follow TRL's too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from torch import Tensor

from marft_algos.common.batch import RolloutBatch
from marft_algos.common.critic_free_advantages import group_advantages
from marft_algos.rollout.collector import Episode
from marft_algos.trainers.base import TrainerConfig
from marft_algos.trainers.branched import batch_branch_advantages
from marft_algos.trainers.critic_free import CriticFreeConfig, CriticFreeTrainer
from marft_algos.trainers.policy_gradient import Objective

__all__ = ["GRPOConfig", "GRPOTrainer"]


@dataclass
class GRPOConfig(CriticFreeConfig):
    """Settings of :class:`GRPOTrainer` (names and defaults as TRL's ``GRPOConfig``)."""

    beta: float = 0.0
    """Weight of the k3 KL to the reference policy in the loss: the policy and the base model
    both under the sampling temperature alone, without top-k/top-p, as in TRL (finite for every
    sampled token, 0 while the policy is the reference; docs/maths.md). 0: no reference forward
    pass."""
    scale_rewards: Literal["group", "batch", "none"] = "group"
    """Divide advantages by the group's reward std, the batch's, or not at all."""
    entropy_coef: float = 0.0
    """Entropy bonus weight (GRPO uses none)."""

    branches: ClassVar[bool] = True

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.scale_rewards not in ("group", "batch", "none"):
            raise ValueError(
                f"scale_rewards must be 'group', 'batch' or 'none', got {self.scale_rewards!r}."
            )


class GRPOTrainer(CriticFreeTrainer):
    """Group-relative policy optimisation over any registered env (no critic)."""

    algorithm: ClassVar[str] = "grpo"
    config_class: ClassVar[type[TrainerConfig]] = GRPOConfig
    config: GRPOConfig

    def objective(self) -> Objective:
        return self.token_objective(beta=self.config.beta)

    def sample_advantages(self, rewards: Tensor, groups: list[tuple[int, str]]) -> Tensor:
        """``(S,)`` group advantages of the samples' rewards ``(S,)``, grouped by ``groups``."""
        scale = self.config.scale_rewards
        if scale == "batch" and self.dist.enabled:
            # Groups are whole on each rank, but the batch's std spans every rank's rewards.
            adv = group_advantages(rewards, groups, scale_rewards="none")
            total, count = self.dist.sum([float(rewards.sum()), float(rewards.numel())])
            mean = total / count
            (squares,) = self.dist.sum([float(((rewards - mean) ** 2).sum())])
            std = (squares / (count - 1)) ** 0.5 if count > 1 else 0.0
            return adv / (std + 1e-4)
        return group_advantages(rewards, groups, scale_rewards=scale)

    def batch_advantages(
        self, episodes: list[Episode], batch: RolloutBatch
    ) -> tuple[Tensor, dict[str, Any]]:
        if self.config.branch is not None:  # siblings from the same state (docs/maths.md)
            scale = self.config.scale_rewards
            return batch_branch_advantages(episodes, batch, scale_rewards=scale, agents=self.agents)
        rewards, groups, index = self.batch_samples(episodes, batch)  # (S,), S labels, (N,)
        return self.sample_advantages(rewards, groups)[index], {}  # (N,)
