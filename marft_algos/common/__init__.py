"""Pure RL maths and data shared by every trainer: advantage estimators, losses, the rollout batch
(no env, no model)."""

from __future__ import annotations

from marft_algos.common.advantages import (
    ScaleRewards,
    action_level_gae,
    discounted_returns,
    flatten_action_tokens,
    group_advantages,
    kl_penalized_returns,
    leave_one_out_advantages,
    normalize_advantages,
    token_level_gae,
    zero_std_group_mask,
)
from marft_algos.common.batch import RolloutBatch, build_rollout_batch
from marft_algos.common.losses import (
    KLEstimator,
    LossType,
    Normalizer,
    action_log_prob,
    aggregate_loss,
    approx_kl,
    behaviour_weights,
    clipped_surrogate,
    entropy_from_log_probs,
    entropy_from_logits,
    kl_k3,
    kl_penalty,
    masked_mean,
    ppo_clip_loss,
    sequence_weights,
    value_loss,
)

__all__ = [
    "KLEstimator",
    "LossType",
    "Normalizer",
    "RolloutBatch",
    "ScaleRewards",
    "action_level_gae",
    "action_log_prob",
    "aggregate_loss",
    "approx_kl",
    "behaviour_weights",
    "build_rollout_batch",
    "clipped_surrogate",
    "discounted_returns",
    "entropy_from_log_probs",
    "entropy_from_logits",
    "flatten_action_tokens",
    "group_advantages",
    "kl_k3",
    "kl_penalized_returns",
    "kl_penalty",
    "leave_one_out_advantages",
    "masked_mean",
    "normalize_advantages",
    "ppo_clip_loss",
    "sequence_weights",
    "token_level_gae",
    "value_loss",
    "zero_std_group_mask",
]
