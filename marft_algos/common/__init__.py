"""Pure RL maths and data shared by every trainer: advantage estimators, losses, the rollout batch
(no env, no model)."""

from __future__ import annotations

from marft_algos.common.advantages import (
    action_level_gae,
    discounted_returns,
    normalize_advantages,
    token_level_gae,
)
from marft_algos.common.batch import RolloutBatch, build_rollout_batch
from marft_algos.common.behaviour_weights import behaviour_weights
from marft_algos.common.branching import (
    BranchAdvantages,
    BranchPath,
    BranchSpread,
    branch_advantages,
    branch_spread,
    monte_carlo_values,
    tree_values,
)
from marft_algos.common.critic_free_advantages import (
    ScaleRewards,
    group_advantages,
    kl_penalized_returns,
    leave_one_out_advantages,
    zero_std_group_mask,
)
from marft_algos.common.layouts import flatten_action_tokens
from marft_algos.common.log_probs import (
    KLEstimator,
    action_log_prob,
    approx_kl,
    entropy_from_log_probs,
    entropy_from_logits,
    kl_k3,
    kl_penalty,
    masked_mean,
)
from marft_algos.common.losses import (
    LossType,
    Normalizer,
    aggregate_loss,
    clipped_surrogate,
    ppo_clip_loss,
    sequence_weights,
    value_loss,
)

__all__ = [
    "BranchAdvantages",
    "BranchPath",
    "BranchSpread",
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
    "branch_advantages",
    "branch_spread",
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
    "monte_carlo_values",
    "normalize_advantages",
    "ppo_clip_loss",
    "sequence_weights",
    "token_level_gae",
    "tree_values",
    "value_loss",
    "zero_std_group_mask",
]
