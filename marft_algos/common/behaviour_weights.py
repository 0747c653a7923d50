"""The decoupled objective's importance weights π_prox/π_behav (AReaL; TRL's and verl's truncated
importance sampling): how the rollout engine's or an older policy's log-probs are corrected for.

Pure functions on torch tensors: no environment, model or trainer imports.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

__all__ = [
    "BEHAVIOUR_WEIGHT_CAP",
    "BEHAVIOUR_WEIGHT_MODES",
    "BehaviourWeightMode",
    "behaviour_weights",
]

#: Default cap of the decoupled objective's importance weight π_prox/π_behav (AReaL's
#: ``behav_imp_weight_cap`` example value); larger weights are truncated to it.
BEHAVIOUR_WEIGHT_CAP = 5.0

#: How the importance weight π_prox/π_behav is formed and bounded (TRL's
#: ``vllm_importance_sampling_mode`` names): per token or per sequence (the product of its tokens'
#: ratios), truncated at the cap or set to 0 above it.
BehaviourWeightMode = Literal["token_truncate", "token_mask", "sequence_truncate", "sequence_mask"]
BEHAVIOUR_WEIGHT_MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")


def behaviour_weights(
    proximal_log_probs: Tensor,
    behaviour_log_probs: Tensor,
    mask: Tensor,
    *,
    cap: float = BEHAVIOUR_WEIGHT_CAP,
    mode: BehaviourWeightMode = "token_truncate",
) -> Tensor:
    """The importance weights π_prox/π_behav of a ``(B, L)`` batch, bounded by ``cap``.

    With d = log π_prox − log π_behav on valid entries (0 on padding):

    * ``"token_truncate"``: ``min(e^d, cap)`` per entry (AReaL's decoupled objective; TRL's and
      verl's truncated importance sampling);
    * ``"token_mask"``: ``e^d``, and 0 where it exceeds ``cap``;
    * ``"sequence_truncate"`` / ``"sequence_mask"``: the same on the row's ratio ``e^{Σ_t d_t}``,
      shared by its entries.

    An entry the proximal policy cannot produce (log π_prox = −inf: outside its top-k/top-p cut)
    gets weight 0, and so does its whole row in the sequence modes.

    Returns:
        ``(B, L)`` detached weights (1 on padding in the token modes).
    """
    if not cap > 0:
        raise ValueError(f"behaviour_weight_cap must be > 0, got {cap}.")
    if mode not in BEHAVIOUR_WEIGHT_MODES:
        raise ValueError(
            f"behaviour_weight_mode must be one of {BEHAVIOUR_WEIGHT_MODES}, got {mode!r}."
        )
    m = mask.bool()
    diff = torch.where(m, proximal_log_probs.detach() - behaviour_log_probs.detach(), 0.0)
    if mode.startswith("sequence"):
        diff = diff.sum(-1, keepdim=True).expand_as(diff)
    weight = torch.exp(diff)
    if mode.endswith("truncate"):
        weight = weight.clamp(max=cap)
    else:
        weight = torch.where(weight > cap, torch.zeros_like(weight), weight)
    return weight
