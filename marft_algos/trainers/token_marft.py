"""Token-level MARFT (paper §4.1.2, §4.2.2): every generated token is an action.

Values are per token. The token-level Bellman backup: inside an action the next state is the next
token (discount ``gamma_token``, default 1 — see below); the last token of agent i bootstraps from
the first token of agent i+1; the last token of the round's last agent receives the round's reward
and bootstraps from the next round. GAE runs per token and the PPO ratio is per token.

``gamma_token`` defaults to 1: discounting every token by 0.99 would leave the first token of a
500-token action only 0.99⁵⁰⁰ ≈ 0.007 of the reward, so discounting would measure length, not time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from marft_algos.trainers.actor_critic import ActorCriticConfig, ActorCriticTrainer
from marft_algos.trainers.base import TrainerConfig

__all__ = ["TokenMARFTConfig", "TokenMARFTTrainer"]


@dataclass
class TokenMARFTConfig(ActorCriticConfig):
    """Token-level MARFT settings (see :class:`ActorCriticConfig`; ``logprob_normalization``,
    an action-level option, must stay ``"none"``)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.refuse_ignored_settings("token")


class TokenMARFTTrainer(ActorCriticTrainer):
    """Token-level MARFT: per-token values, Bellman backup across agents, per-token PPO ratios."""

    algorithm: ClassVar[str] = "token-marft"
    level: ClassVar[Literal["action", "token"]] = "token"
    config_class: ClassVar[type[TrainerConfig]] = TokenMARFTConfig
