"""Action-level MARFT (paper §4.1.1, Algorithm 3): one value and one PPO ratio per agent action.

The team's rounds are flattened into the sequence of agent decisions; GAE runs backwards over it
(agent i bootstraps from agent i+1 of the same round, the last agent from the first agent of the
next round). Each agent's adapter is updated with the clipped surrogate of its own action
probability ``P(aⁱ | ôⁱ, a^{1:i−1}) = Π_j P(w^{i,j} | ...)`` (eq. 6), optionally normalised by the
action's token or word count.

Example::

    policy = MultiAgentPolicy.from_pretrained(model_path, env.possible_agents)
    trainer = ActionMARFTTrainer(policy, lambda: marft_envs.make("math-dual-v7"),
                                 ActionMARFTConfig(iterations=50), critic=Critic(policy))
    trainer.train(progress=True)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from marft_algos.trainers.actor_critic import ActorCriticConfig, ActorCriticTrainer
from marft_algos.trainers.base import TrainerConfig

__all__ = ["ActionMARFTConfig", "ActionMARFTTrainer"]


@dataclass
class ActionMARFTConfig(ActorCriticConfig):
    """Action-level MARFT settings (paper Table 3 defaults; see :class:`ActorCriticConfig`).

    The token-level discounts ``gamma_token`` and ``lam_token`` must stay at 1 (refused otherwise).
    """

    def __post_init__(self) -> None:
        super().__post_init__()
        self.refuse_ignored_settings("action")


class ActionMARFTTrainer(ActorCriticTrainer):
    """Action-level MARFT: GAE over agent decisions, a PPO ratio per action."""

    algorithm: ClassVar[str] = "action-marft"
    level: ClassVar[Literal["action", "token"]] = "action"
    config_class: ClassVar[type[TrainerConfig]] = ActionMARFTConfig
