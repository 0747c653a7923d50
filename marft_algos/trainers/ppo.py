"""Single-agent PPO, action-level or token-level: the paper's single-agent baselines (§5.1).

The same update as MARFT with a team of one; the trainer refuses multi-agent envs so a baseline
cannot silently train a team.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal

from pettingzoo import AECEnv

from marft_algos.distributed import DistributedContext
from marft_algos.protocols import CriticLike, PolicyLike, RolloutBackend
from marft_algos.trainers.actor_critic import ActorCriticConfig, ActorCriticTrainer
from marft_algos.trainers.base import TrainerConfig

__all__ = ["PPOConfig", "PPOTrainer"]


@dataclass
class PPOConfig(ActorCriticConfig):
    """Single-agent PPO settings (see :class:`ActorCriticConfig`)."""

    level: Literal["action", "token"] = "action"
    """Granularity: one ratio and value per action, or per token."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.level not in ("action", "token"):
            raise ValueError(f"PPOConfig.level must be 'action' or 'token', got {self.level!r}.")
        self.refuse_ignored_settings(self.level)


class PPOTrainer(ActorCriticTrainer):
    """PPO for a one-agent env (e.g. ``math-single-v7``)."""

    algorithm: ClassVar[str] = "ppo"
    config_class: ClassVar[type[TrainerConfig]] = PPOConfig

    @classmethod
    def level_of(cls, config: ActorCriticConfig) -> str:
        assert isinstance(config, PPOConfig)
        return config.level

    def __init__(
        self,
        policy: PolicyLike,
        env_fn: Callable[[], AECEnv],
        config: PPOConfig,
        *,
        critic: CriticLike,
        eval_env_fn: Callable[[], AECEnv] | None = None,
        distributed: DistributedContext | None = None,
        rollout_backend: RolloutBackend | None = None,
    ) -> None:
        super().__init__(
            policy,
            env_fn,
            config,
            critic=critic,
            eval_env_fn=eval_env_fn,
            distributed=distributed,
            rollout_backend=rollout_backend,
        )
        self.level = config.level  # type: ignore[misc]  # this run's granularity, for introspection

    @classmethod
    def check_team(cls, agents: Sequence[str]) -> None:
        if len(agents) != 1:
            raise ValueError(
                f"PPO is the single-agent baseline, but the env has agents {list(agents)}; train a "
                f"team with action- or token-level MARFT, GRPO, RLOO or REINFORCE++, or use a "
                f"one-agent env (e.g. math-single-v7)."
            )
