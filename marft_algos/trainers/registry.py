"""Algorithm names → config and trainer classes, and a trainer built from a name."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pettingzoo import AECEnv

from marft_algos.protocols import RolloutBackend
from marft_algos.trainers.action_marft import ActionMARFTConfig, ActionMARFTTrainer
from marft_algos.trainers.base import Trainer, TrainerConfig
from marft_algos.trainers.critic_free import CriticFreeTrainer
from marft_algos.trainers.grpo import GRPOConfig, GRPOTrainer
from marft_algos.trainers.ppo import PPOConfig, PPOTrainer
from marft_algos.trainers.reinforce_pp import REINFORCEPPConfig, REINFORCEPPTrainer
from marft_algos.trainers.rloo import RLOOConfig, RLOOTrainer
from marft_algos.trainers.token_marft import TokenMARFTConfig, TokenMARFTTrainer

__all__ = ["ALGORITHMS", "build_trainer", "owners_of"]

#: Algorithm name → (config class, trainer class).
ALGORITHMS: dict[str, tuple[type[TrainerConfig], type[Trainer]]] = {
    "action-marft": (ActionMARFTConfig, ActionMARFTTrainer),
    "token-marft": (TokenMARFTConfig, TokenMARFTTrainer),
    "ppo": (PPOConfig, PPOTrainer),
    "grpo": (GRPOConfig, GRPOTrainer),
    "rloo": (RLOOConfig, RLOOTrainer),
    "reinforce-pp": (REINFORCEPPConfig, REINFORCEPPTrainer),
}


def owners_of(field: str) -> list[str]:
    """The algorithms whose config has ``field``."""
    import dataclasses

    return [
        name
        for name, (config, _) in ALGORITHMS.items()
        if field in {f.name for f in dataclasses.fields(config)}
    ]


def build_trainer(
    algorithm: str,
    policy: Any,
    env_fn: Callable[[], AECEnv],
    config: TrainerConfig,
    *,
    eval_env_fn: Callable[[], AECEnv] | None = None,
    critic_seed: int = 0,
    rollout_backend: RolloutBackend | None = None,
) -> Trainer:
    """Instantiate the trainer for ``algorithm``, with a critic on the policy's base when it needs
    one (not GRPO, RLOO or REINFORCE++); ``rollout_backend`` generates its rollouts (default: the
    policy)."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"Unknown algorithm {algorithm!r}; choose one of {sorted(ALGORITHMS)}.")
    _, trainer_class = ALGORITHMS[algorithm]
    if issubclass(trainer_class, CriticFreeTrainer):
        return trainer_class(
            policy, env_fn, config, eval_env_fn=eval_env_fn, rollout_backend=rollout_backend
        )
    from marft_algos.policy.critic import Critic

    critic = Critic(policy, seed=critic_seed)
    return trainer_class(
        policy,
        env_fn,
        config,
        critic=critic,
        eval_env_fn=eval_env_fn,
        rollout_backend=rollout_backend,
    )
