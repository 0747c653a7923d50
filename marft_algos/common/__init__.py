"""Pure RL maths shared by every trainer: advantage estimators and losses (no env, no model)."""

from __future__ import annotations

from marft_algos.common.advantages import (
    ScaleRewards,
    action_level_gae,
    discounted_returns,
    flatten_action_tokens,
    group_advantages,
    normalize_advantages,
    token_level_gae,
    zero_std_group_mask,
)
from marft_algos.common.losses import (
    LossType,
    action_log_prob,
    aggregate_loss,
    approx_kl,
    entropy_from_log_probs,
    entropy_from_logits,
    kl_k3,
    masked_mean,
    ppo_clip_loss,
    value_loss,
)

__all__ = [
    "LossType",
    "ScaleRewards",
    "action_level_gae",
    "action_log_prob",
    "aggregate_loss",
    "approx_kl",
    "discounted_returns",
    "entropy_from_log_probs",
    "entropy_from_logits",
    "flatten_action_tokens",
    "group_advantages",
    "kl_k3",
    "masked_mean",
    "normalize_advantages",
    "ppo_clip_loss",
    "token_level_gae",
    "value_loss",
    "zero_std_group_mask",
]
