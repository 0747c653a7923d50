"""Algorithm names → config and trainer classes, and a trainer built from a name."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pettingzoo import AECEnv

from marft_algos.protocols import RolloutBackend
from marft_algos.trainers.action_marft import ActionMARFTTrainer
from marft_algos.trainers.base import Trainer, TrainerConfig
from marft_algos.trainers.critic_free import CriticFreeTrainer
from marft_algos.trainers.grpo import GRPOTrainer
from marft_algos.trainers.ppo import PPOTrainer
from marft_algos.trainers.reinforce_pp import REINFORCEPPTrainer
from marft_algos.trainers.rloo import RLOOTrainer
from marft_algos.trainers.token_marft import TokenMARFTTrainer

__all__ = ["ALGORITHMS", "build_trainer", "owners_of", "register_trainer"]

#: Algorithm name → (config class, trainer class), filled by :func:`register_trainer`.
ALGORITHMS: dict[str, tuple[type[TrainerConfig], type[Trainer]]] = {}


def register_trainer(trainer_class: type[Trainer]) -> type[Trainer]:
    """Make a trainer buildable by its ``algorithm`` name (:func:`build_trainer`, ``marft train
    --algo``) with its ``config_class``; returns the class, so it also works as a decorator.

    Raises:
        ValueError: Another class is registered under that name, or the trainer kept the base
            class's name.
    """
    name = trainer_class.algorithm
    if name == Trainer.algorithm:
        raise ValueError(
            f"{trainer_class.__name__} has no algorithm name of its own; set its class attribute "
            f"algorithm = 'my-algo' (the --algo value) before registering it."
        )
    taken = ALGORITHMS.get(name)
    if taken is not None and taken[1] is not trainer_class:
        raise ValueError(
            f"--algo {name!r} is already {taken[1].__name__}; give {trainer_class.__name__} "
            f"another algorithm name."
        )
    ALGORITHMS[name] = (trainer_class.config_class, trainer_class)
    return trainer_class


register_trainer(ActionMARFTTrainer)
register_trainer(TokenMARFTTrainer)
register_trainer(PPOTrainer)
register_trainer(GRPOTrainer)
register_trainer(RLOOTrainer)
register_trainer(REINFORCEPPTrainer)


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
