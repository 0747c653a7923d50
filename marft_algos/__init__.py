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
    "ActionMARFTConfig": "marft_algos.action_marft",
    "ActionMARFTTrainer": "marft_algos.action_marft",
    "ActorCriticConfig": "marft_algos.actor_critic",
    "ActorCriticTrainer": "marft_algos.actor_critic",
    "TokenMARFTConfig": "marft_algos.token_marft",
    "TokenMARFTTrainer": "marft_algos.token_marft",
    "PPOConfig": "marft_algos.ppo",
    "PPOTrainer": "marft_algos.ppo",
    "GRPOConfig": "marft_algos.grpo",
    "GRPOTrainer": "marft_algos.grpo",
    "RLOOConfig": "marft_algos.rloo",
    "RLOOTrainer": "marft_algos.rloo",
    "REINFORCEPPConfig": "marft_algos.reinforce_pp",
    "REINFORCEPPTrainer": "marft_algos.reinforce_pp",
    "CriticFreeConfig": "marft_algos.critic_free",
    "CriticFreeTrainer": "marft_algos.critic_free",
    "Trainer": "marft_algos.trainer",
    "TrainerConfig": "marft_algos.trainer",
    "ConfigMismatchError": "marft_algos.run_dir",
    "RunDirectory": "marft_algos.run_dir",
    "RunExistsError": "marft_algos.run_dir",
    "RunInUseError": "marft_algos.run_dir",
    "TrainingDiverged": "marft_algos.run_dir",
    "MultiAgentPolicy": "marft_algos.policy",
    "AgentSpec": "marft_algos.policy",
    "LoraSettings": "marft_algos.policy",
    "Critic": "marft_algos.policy",
    "CheckpointError": "marft_algos.policy",
    "GenerationSettings": "marft_algos.rollout",
    "RolloutCollector": "marft_algos.rollout",
    "ALGORITHMS": "marft_algos.cli.algorithms",
    "build_trainer": "marft_algos.cli.algorithms",
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
