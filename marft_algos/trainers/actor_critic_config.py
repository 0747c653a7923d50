"""The settings of the actor-critic trainers (action- and token-level MARFT, PPO):
``ActorCriticConfig``, with the paper's Table 3 defaults."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from marft_algos.trainers.config import TrainerConfig, check_clip_range, check_num_minibatches

__all__ = ["ActorCriticConfig"]


@dataclass
class ActorCriticConfig(TrainerConfig):
    """Settings of the actor-critic trainers (defaults: paper Table 3)."""

    branches: ClassVar[bool] = True  # Monte-Carlo values at the branched states (VinePPO)

    critic_learning_rate: float = 1e-5
    """Adam learning rate of the critic head (paper: 1e-5)."""
    gamma: float = 0.99
    """Discount γ between decisions (paper: 0.99)."""
    gae_lambda: float = 0.95
    """GAE λ (paper: 0.95)."""
    intra_round_discount: bool = True
    """Apply γ and λ between agents inside a round, as the reference implementation does."""
    gamma_token: float = 1.0
    """Token level: discount between tokens of one action (1: reward is not diluted by length)."""
    lam_token: float = 1.0
    """Token level: GAE λ between tokens of one action. 1 (default) makes every token of an action
    share the action's return and differ only by its own value baseline, as at action level; a λ
    below 1 per token fades the reward as λ^L over an L-token action (0.95^100 ≈ 0.006), so early
    tokens would learn from the critic alone."""
    epsilon: float = 0.2
    """PPO clip range ε (paper: 0.2); the lower bound with ``epsilon_high``."""
    epsilon_high: float | None = None
    """Upper clip range (DAPO clip-higher); None means symmetric clipping."""
    entropy_coef: float = 0.1
    """Entropy bonus weight (paper: 0.1; 0.01 and 0 in other runs)."""
    value_loss: Literal["huber", "mse"] = "huber"
    """Critic loss (paper: Huber)."""
    huber_delta: float = 10.0
    """Huber threshold."""
    value_clip: float | None = None
    """Clip value updates to this range around the rollout values (None: off)."""
    value_loss_coef: float = 1.0
    """Weight of the critic loss (paper: 1)."""
    ppo_epochs: int = 1
    """Passes over each rollout batch (paper: 1)."""
    num_minibatches: int = 1
    """Minibatches per pass (paper: 1)."""
    normalize_advantages: bool = True
    """Standardise advantages over the batch."""
    normalize_advantages_per_agent: bool = False
    """With ``normalize_advantages``: standardise each agent's advantages over its own decisions
    instead of the whole batch (steadier gradients when agents' rewards differ in scale)."""
    trust_region_kl: float | None = None
    """Trust-region hard cut (paper App. A): after each policy step, the approx-KL between the
    rollout policy and the stepped policy is measured on the step's own minibatch; a step that
    takes it above this threshold is undone (adapters and optimizer state restored) and counted
    in ``train/skipped_trust_region``. None: off."""
    logprob_normalization: Literal["none", "token", "word"] = "none"
    """Action level: divide an action's log-prob by its token or word count (paper §4.1.1)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("critic_learning_rate", "huber_delta"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}.")
        for name in ("gamma", "gae_lambda", "gamma_token", "lam_token"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}.")
        check_clip_range(self.epsilon, self.epsilon_high)
        if self.ppo_epochs < 1:
            raise ValueError(f"ppo_epochs must be >= 1, got {self.ppo_epochs}.")
        check_num_minibatches(self.num_minibatches, self.episodes_per_iteration)
        if self.normalize_advantages_per_agent and not self.normalize_advantages:
            raise ValueError(
                "normalize_advantages_per_agent=True needs normalize_advantages=True (it chooses "
                "how the advantages are normalised, per agent instead of over the batch); set "
                "normalize_advantages=True, or drop normalize_advantages_per_agent."
            )
        if self.value_loss not in ("huber", "mse"):
            raise ValueError(f"value_loss must be 'huber' or 'mse', got {self.value_loss!r}.")
        if self.logprob_normalization not in ("none", "token", "word"):
            raise ValueError(
                f"logprob_normalization must be 'none', 'token' or 'word', got {self.logprob_normalization!r}."
            )
        if self.trust_region_kl is not None and self.trust_region_kl <= 0:
            raise ValueError(f"trust_region_kl must be > 0 or None, got {self.trust_region_kl}.")

    def refuse_ignored_settings(self, level: str) -> None:
        """Refuse settings that training at ``level`` (``"action"`` or ``"token"``) would ignore,
        saying how to fix them (the config classes with a known level call it)."""
        if level == "action":
            changed = [
                f"{name}={getattr(self, name)}"
                for name in ("gamma_token", "lam_token")
                if getattr(self, name) != 1.0
            ]
            if changed:
                raise ValueError(
                    f"{', '.join(changed)} only applies at token level (discounting between the "
                    f"tokens of one action); action-level training has no such step and would "
                    f"ignore it. Leave it at 1, or train at token level (TokenMARFTConfig, "
                    f"PPOConfig(level='token'))."
                )
        elif self.logprob_normalization != "none":
            raise ValueError(
                f"logprob_normalization={self.logprob_normalization!r} only applies at action "
                f"level (it rescales an action's log-prob); token-level training takes one ratio "
                f"per token and would ignore it. Leave it at 'none', or train at action level "
                f"(ActionMARFTConfig, PPOConfig(level='action'))."
            )
