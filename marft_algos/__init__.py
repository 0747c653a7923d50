"""marft_algos: trainers for LLM teams on marft_envs environments.

Every trainer and its config import from the package root::

    from marft_algos import GRPOConfig, GRPOTrainer, MultiAgentPolicy

Names resolve lazily, so ``import marft_algos`` stays cheap until one is used.
"""

from __future__ import annotations

import importlib
from typing import Any

#: Public name → module that defines it.
_EXPORTS = {
    "ActionMARFTConfig": "marft_algos.trainers.action_marft",
    "ActionMARFTTrainer": "marft_algos.trainers.action_marft",
    "ActorCriticConfig": "marft_algos.trainers.actor_critic",
    "ActorCriticTrainer": "marft_algos.trainers.actor_critic",
    "TokenMARFTConfig": "marft_algos.trainers.token_marft",
    "TokenMARFTTrainer": "marft_algos.trainers.token_marft",
    "PPOConfig": "marft_algos.trainers.ppo",
    "PPOTrainer": "marft_algos.trainers.ppo",
    "GRPOConfig": "marft_algos.trainers.grpo",
    "GRPOTrainer": "marft_algos.trainers.grpo",
    "RLOOConfig": "marft_algos.trainers.rloo",
    "RLOOTrainer": "marft_algos.trainers.rloo",
    "REINFORCEPPConfig": "marft_algos.trainers.reinforce_pp",
    "REINFORCEPPTrainer": "marft_algos.trainers.reinforce_pp",
    "CriticFreeConfig": "marft_algos.trainers.critic_free",
    "CriticFreeTrainer": "marft_algos.trainers.critic_free",
    "Trainer": "marft_algos.trainers.base",
    "TrainerConfig": "marft_algos.trainers.base",
    "ConfigMismatchError": "marft_algos.runs.folder",
    "RunDirectory": "marft_algos.runs.folder",
    "RunExistsError": "marft_algos.runs.folder",
    "RunInUseError": "marft_algos.runs.folder",
    "TrainingDiverged": "marft_algos.runs.folder",
    "MultiAgentPolicy": "marft_algos.policy",
    "AgentSpec": "marft_algos.policy",
    "LoraSettings": "marft_algos.policy",
    "Critic": "marft_algos.policy",
    "CheckpointError": "marft_algos.runs.checkpoint",
    "policy_from_checkpoint": "marft_algos.runs.checkpoint",
    "GenerationSettings": "marft_algos.protocols",
    "RolloutCollector": "marft_algos.rollout.collector",
    "ALGORITHMS": "marft_algos.trainers.registry",
    "build_trainer": "marft_algos.trainers.registry",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'marft_algos' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
