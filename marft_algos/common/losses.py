"""Policy and value losses for MARFT, PPO and GRPO (paper eqs. 2, 3, 5, 6).

The per-token statistics they build on (masked means, KL estimators, entropies, an action's
log-prob) live in :mod:`marft_algos.common.log_probs`, the decoupled objective's importance
weights in :mod:`marft_algos.common.behaviour_weights`.

Pure functions on torch tensors: no environment, model or trainer imports. Losses are returned as
quantities to *minimise*; statistics are detached scalar tensors.

Shapes: action-level inputs are ``(B,)`` (one entry per agent decision); token-level inputs are
``(B, L)`` with a ``(B, L)`` bool mask of generated (non-pad) tokens.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from marft_algos.common.behaviour_weights import (
    BEHAVIOUR_WEIGHT_CAP,
    BehaviourWeightMode,
    behaviour_weights,
)
from marft_algos.common.log_probs import masked_mean

__all__ = [
    "ImportanceSamplingLevel",
    "LossType",
    "aggregate_loss",
    "clipped_surrogate",
    "ppo_clip_loss",
    "sequence_weights",
    "value_loss",
]

#: How per-token losses are aggregated: TRL's ``loss_type`` names, the config knob's values.
LossType = Literal["grpo", "bnpo", "dapo", "dr_grpo"]

_LOSS_TYPES = ("grpo", "bnpo", "dapo", "dr_grpo")


#: One PPO ratio per token, or one per sequence: the geometric mean of its tokens' ratios (GSPO;
#: TRL's ``importance_sampling_level``).
ImportanceSamplingLevel = Literal["token", "sequence"]


def aggregate_loss(
    per_token: Tensor,
    mask: Tensor | None = None,
    loss_type: LossType = "dapo",
    *,
    max_completion_length: int | None = None,
    num_items_in_batch: float | Tensor | None = None,
) -> Tensor:
    """Reduce a ``(B, L)`` per-token loss to a scalar with TRL's ``loss_type`` semantics.

    See :func:`ppo_clip_loss` for the definitions. Every aggregation is linear in the per-token
    loss, so ``aggregate(ℓ_clip) + β·aggregate(kl_k3)`` equals aggregating ``ℓ_clip + β·kl_k3``
    token by token, as GRPO (paper eq. 2) writes it.

    Args:
        per_token: ``(B, L)`` per-token loss (a ``(B,)`` input is ``B`` rows of one entry).
        mask: same shape, bool, ``True`` on valid entries (default: all).
        loss_type: ``"dapo"``, ``"bnpo"``, ``"grpo"`` or ``"dr_grpo"``.
        max_completion_length: constant length for ``"dr_grpo"`` (default ``L``).
        num_items_in_batch: normaliser for ``"dapo"`` (default: valid entries in this call).

    Returns:
        Scalar loss.
    """
    if per_token.dim() == 1:
        per_token = per_token.unsqueeze(-1)  # (B, 1)
    valid = (
        torch.ones_like(per_token, dtype=torch.bool)
        if mask is None
        else mask.reshape(per_token.shape).bool()
    )
    m = valid.to(per_token.dtype)
    kept = torch.where(valid, per_token, torch.zeros_like(per_token))  # (B, L)
    total = kept.sum()
    if loss_type == "bnpo":
        return total / m.sum().clamp(min=1.0)
    if loss_type == "grpo":
        return (kept.sum(-1) / m.sum(-1).clamp(min=1.0)).mean()
    if loss_type == "dapo":
        norm = m.sum().clamp(min=1.0) if num_items_in_batch is None else num_items_in_batch
        return total / norm
    if loss_type == "dr_grpo":
        length = per_token.shape[-1] if max_completion_length is None else max_completion_length
        return total / (per_token.shape[0] * length)
    raise ValueError(f"loss_type must be one of {_LOSS_TYPES}, got {loss_type!r}")


def ppo_clip_loss(
    log_probs: Tensor,
    old_log_probs: Tensor,
    advantages: Tensor,
    mask: Tensor | None = None,
    *,
    epsilon: float = 0.2,
    epsilon_high: float | None = None,
    loss_type: LossType = "dapo",
    max_completion_length: int | None = None,
    num_items_in_batch: float | Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """PPO clipped surrogate loss (paper eq. 5), with DAPO clip-higher (eq. 3) and TRL aggregation.

    Per entry: ratio = exp(lp − old_lp) and ℓ = −min(ratio·A, clip(ratio, 1 − ε_low, 1 + ε_high)·A),
    with ε_low = ``epsilon`` and ε_high = ``epsilon_high`` (default ``epsilon``: symmetric clip).

    Aggregation of the per-entry loss over valid entries (TRL ``GRPOConfig.loss_type`` names):

    * ``"dapo"`` (default): sum / ``num_items_in_batch`` — the number of valid tokens in the whole
      generation batch (across gradient-accumulation steps and processes), defaulting to this
      call's valid count: the mean over every valid entry;
    * ``"bnpo"``: sum over all valid entries of this call / their number;
    * ``"grpo"``: mean over each row's valid entries, then mean over rows (a row without valid
      entries counts as 0);
    * ``"dr_grpo"``: sum / (rows × ``max_completion_length``), a constant independent of lengths
      (default: ``L``, the padded width).

    For action-level inputs of shape ``(B,)`` every entry is its own row, so ``"dapo"`` is the
    masked mean over decisions.

    Args:
        log_probs: ``(B,)`` action log-probs or ``(B, L)`` token log-probs under π_θ.
        old_log_probs: same shape, under the rollout policy π_old.
        advantages: same shape, or ``(B,)`` broadcast over the tokens of each row (GRPO).
        mask: bool, same shape as ``log_probs``; ``True`` on valid entries (default: all).
        epsilon: ε_low, lower clip range.
        epsilon_high: ε_high, upper clip range (default ``epsilon``).
        loss_type: aggregation, see above.
        max_completion_length: constant length for ``"dr_grpo"``.
        num_items_in_batch: normaliser for ``"dapo"``.

    Returns:
        ``(loss, stats)``. ``stats`` (detached scalars over valid entries): ``approx_kl`` (k3,
        see :func:`approx_kl`), ``clip_fraction`` (entries where the clipped term is active, i.e.
        the gradient is cut: ratio < 1 − ε_low with A < 0, or ratio > 1 + ε_high with A > 0),
        ``clip_low_fraction``, ``clip_high_fraction``, ``ratio_mean``.
    """
    per_token, terms = clipped_surrogate(
        log_probs, old_log_probs, advantages, mask, epsilon=epsilon, epsilon_high=epsilon_high
    )
    m = terms["mask"]
    loss = aggregate_loss(
        per_token,
        m,
        loss_type,
        max_completion_length=max_completion_length,
        num_items_in_batch=num_items_in_batch,
    )
    stats = {name: masked_mean(terms[name], m) for name in _SURROGATE_STATS}
    return loss, stats


_SURROGATE_STATS = (
    "approx_kl",
    "clip_fraction",
    "clip_low_fraction",
    "clip_high_fraction",
    "ratio_mean",
)


def clipped_surrogate(
    log_probs: Tensor,
    old_log_probs: Tensor,
    advantages: Tensor,
    mask: Tensor | None = None,
    *,
    epsilon: float = 0.2,
    epsilon_high: float | None = None,
    proximal_log_probs: Tensor | None = None,
    behaviour_weight_cap: float = BEHAVIOUR_WEIGHT_CAP,
    behaviour_weight_mode: BehaviourWeightMode = "token_truncate",
    importance_sampling_level: ImportanceSamplingLevel = "token",
) -> tuple[Tensor, dict[str, Tensor]]:
    """Per-entry PPO clipped surrogate (paper eq. 5, DAPO clip-higher), before any aggregation.

    With ``proximal_log_probs`` it is the decoupled objective for stale data (AReaL's decoupled
    PPO, after Hilton et al. 2021), which also corrects rollouts whose log-probs come from another
    engine (truncated importance sampling): ``old_log_probs`` are then the behaviour policy's (the
    version, or the engine, that sampled), the ratio and its clip are taken against the proximal
    policy (the trainer's weights at the start of this update), and each entry is weighted by
    :func:`behaviour_weights` (by default ``min(π_prox/π_behav, cap)``)::

        ℓ = −w · min(r·A, clip(r, 1−ε_low, 1+ε_high)·A),  r = π_θ/π_prox

    An entry the proximal policy cannot produce (log π_prox = −inf, a stale token outside its
    top-k/top-p cut) has w = 0 and adds exactly 0 to the loss and its gradient.

    With ``importance_sampling_level="sequence"`` (GSPO) every entry of a row shares one ratio,
    the geometric mean of its tokens' ratios ``r = exp(mean_t (log π_θ − log π_prox))`` over the
    row's valid entries (those the proximal policy can produce), clipped as above; TRL's
    definition. See ``docs/maths.md``, "Stale rollouts" and "Sequence-level ratios".

    Without ``proximal_log_probs`` (or on fresh data, where the caller passes none) it is the
    plain surrogate, by the same code as before.

    Use it to weight entries yourself (:func:`sequence_weights`); :func:`ppo_clip_loss` is this
    plus TRL's aggregation.

    Args:
        log_probs: ``(B,)`` or ``(B, L)`` log-probs under π_θ.
        old_log_probs: same shape, under the rollout policy.
        advantages: same shape, or ``(B,)`` broadcast over each row's tokens.
        mask: bool, same shape as ``log_probs`` (default: all valid).
        epsilon: ε_low.
        epsilon_high: ε_high (default ``epsilon``).
        proximal_log_probs: same shape as ``log_probs``, under the proximal policy (None: the
            behaviour policy is the proximal one, the plain surrogate).
        behaviour_weight_cap: Bound of the importance weight π_prox/π_behav (> 0).
        behaviour_weight_mode: How that weight is formed and bounded (:func:`behaviour_weights`).
        importance_sampling_level: ``"token"`` (one ratio per entry) or ``"sequence"`` (GSPO).

    Returns:
        ``(per_entry_loss, terms)``: the ``(B, L)`` loss to minimise (``L = 1`` for ``(B,)``
        inputs; 0 on padding) and detached ``(B, L)`` tensors ``approx_kl`` (k3 of
        KL(π_old ‖ π_θ) per token, π_old the proximal policy when given), ``clip_fraction``,
        ``clip_low_fraction``, ``clip_high_fraction``, ``ratio_mean`` (the ratio the loss uses:
        the row's at sequence level), the ``(B, L)`` bool ``mask`` and, with
        ``proximal_log_probs``, ``behaviour_weight``.
    """
    eps_high = epsilon if epsilon_high is None else epsilon_high
    if epsilon < 0 or eps_high < 0:
        raise ValueError(
            f"clip ranges must be >= 0, got epsilon={epsilon}, epsilon_high={epsilon_high}"
        )
    if importance_sampling_level not in ("token", "sequence"):
        raise ValueError(
            f"importance_sampling_level must be 'token' or 'sequence', got "
            f"{importance_sampling_level!r}"
        )
    if log_probs.shape != old_log_probs.shape:
        raise ValueError(
            f"log_probs {tuple(log_probs.shape)} and old_log_probs {tuple(old_log_probs.shape)} differ"
        )
    lp = (
        log_probs if log_probs.dim() == 2 else log_probs.reshape(-1, 1)
    )  # (B, L); L = 1 action-level
    old = old_log_probs.reshape(lp.shape)
    adv = advantages
    if adv.shape != log_probs.shape:
        if adv.dim() == 1 and log_probs.dim() == 2 and adv.shape[0] == log_probs.shape[0]:
            adv = adv.unsqueeze(-1)  # (B, 1): one advantage per sequence, as in GRPO
        else:
            raise ValueError(
                f"advantages shape {tuple(advantages.shape)} must equal log_probs shape "
                f"{tuple(log_probs.shape)} or be (B,)"
            )
    adv = adv.reshape(lp.shape[0], -1).to(lp.dtype).detach()
    m = torch.ones_like(lp, dtype=torch.bool) if mask is None else mask.reshape(lp.shape).bool()

    behaviour_weight = None
    reachable = m  # the entries whose ratio is defined
    if proximal_log_probs is not None:
        if proximal_log_probs.shape != log_probs.shape:
            raise ValueError(
                f"proximal_log_probs {tuple(proximal_log_probs.shape)} and log_probs "
                f"{tuple(log_probs.shape)} differ"
            )
        prox = proximal_log_probs.reshape(lp.shape).detach()
        behaviour_weight = behaviour_weights(
            prox, old, m, cap=behaviour_weight_cap, mode=behaviour_weight_mode
        )
        # π_prox = 0 (log −inf): the ratio π_θ/π_prox is undefined, the weight is 0.
        reachable = m & torch.isfinite(prox)
        old = prox  # the ratio and its clip are around the proximal policy
    # Entries off `reachable` (padding: garbage log-probs, −inf) get ratio 1, so they cannot turn
    # the loss or its gradient into NaN (`where` passes no gradient to the other branch).
    log_ratio = torch.where(reachable, lp - old.detach(), torch.zeros_like(lp))  # (B, L)
    used = log_ratio
    if importance_sampling_level == "sequence":
        count = reachable.sum(-1, keepdim=True).clamp(min=1).to(lp.dtype)
        used = (log_ratio.sum(-1, keepdim=True) / count).expand_as(lp)  # (B, L): the row's
    ratio = torch.exp(used)
    clipped = torch.clamp(ratio, 1.0 - epsilon, 1.0 + eps_high)
    per_token = -torch.min(ratio * adv, clipped * adv)  # (B, L)
    if behaviour_weight is not None:
        per_token = torch.where(reachable, behaviour_weight * per_token, torch.zeros_like(lp))
    per_token = torch.where(m, per_token, torch.zeros_like(per_token))

    with torch.no_grad():
        low = (ratio < 1.0 - epsilon) & (adv < 0)
        high = (ratio > 1.0 + eps_high) & (adv > 0)
        terms = {
            "approx_kl": torch.expm1(log_ratio) - log_ratio,
            "clip_fraction": (low | high).float(),
            "clip_low_fraction": low.float(),
            "clip_high_fraction": high.float(),
            "ratio_mean": ratio.detach(),
            "mask": m,
        }
        if behaviour_weight is not None:
            terms["behaviour_weight"] = behaviour_weight
    return per_token, terms


Normalizer = Literal["token", "sequence", "constant"]


def sequence_weights(
    mask: Tensor,
    normalizer: Normalizer,
    *,
    total_tokens: float,
    total_sequences: float,
    caps: Tensor | None = None,
) -> Tensor:
    """Per-token weights that turn a sum over tokens into a batch loss, independent of how the
    batch is split (gradient accumulation, agents, processes).

    With ``w`` from here, ``Σ w·ℓ`` over every chunk of a batch equals the loss of the whole
    batch, and the same ``w`` weights the entropy bonus and the KL penalty, so the full objective
    is aggregated one way:

    * ``"token"``: ``1 / total_tokens`` (TRL's ``dapo``; ``bnpo`` here too — TRL's ``bnpo``
      divides by the tokens of each local batch, which makes the gradient depend on the split);
    * ``"sequence"``: ``1 / (total_sequences · L_b)`` — the mean over a sequence's tokens, then
      over sequences (``grpo``);
    * ``"constant"``: ``1 / (total_sequences · cap_b)`` with ``cap_b`` the sequence's own token
      cap (Dr. GRPO's constant; per-agent caps respected).

    Args:
        mask: ``(B, L)`` bool, True on tokens.
        normalizer: ``"token"``, ``"sequence"`` or ``"constant"``.
        total_tokens: Tokens in the whole batch.
        total_sequences: Sequences in the whole batch.
        caps: ``(B,)`` token caps, required for ``"constant"``.

    Returns:
        ``(B, L)`` float weights, 0 on padding.
    """
    m = mask.float()
    if normalizer == "token":
        return m / max(float(total_tokens), 1.0)
    if normalizer == "sequence":
        return m / (m.sum(-1, keepdim=True).clamp(min=1.0) * max(float(total_sequences), 1.0))
    if normalizer == "constant":
        if caps is None:
            raise ValueError("normalizer='constant' needs caps, each sequence's max_new_tokens.")
        return m / (caps.to(m).clamp(min=1.0).unsqueeze(-1) * max(float(total_sequences), 1.0))
    raise ValueError(f"normalizer must be 'token', 'sequence' or 'constant', got {normalizer!r}")


def value_loss(
    values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    mask: Tensor | None = None,
    *,
    huber_delta: float | None = None,
    clip_range: float | None = None,
) -> Tensor:
    """Critic regression loss (paper Algorithm 3 line 17), optional Huber and PPO value clipping.

    With e = returns − values: MSE ℓ = ½·e²; Huber ℓ = ½·e² if abs(e) ≤ δ else δ·(abs(e) − ½δ). The ½ makes
    the two agree for small errors, so switching between them does not rescale the coefficient.
    With ``clip_range`` c: V_clip = old + clip(V − old, −c, c) and ℓ = max(ℓ(V), ℓ(V_clip)), the
    pessimistic choice PPO implementations use to keep the critic near its rollout values.

    Args:
        values: predicted values, ``(B,)`` or ``(B, L)``.
        old_values: values recorded at rollout (used only for clipping), same shape.
        returns: targets (GAE returns), same shape.
        mask: bool mask of valid entries.
        huber_delta: Huber threshold δ; ``None`` for MSE.
        clip_range: value clipping range; ``None`` to disable.

    Returns:
        Scalar masked mean of ℓ.
    """

    def elementwise(pred: Tensor) -> Tensor:
        err = returns.detach() - pred
        if huber_delta is None:
            return 0.5 * err**2
        abs_err = err.abs()
        return torch.where(
            abs_err <= huber_delta, 0.5 * err**2, huber_delta * (abs_err - 0.5 * huber_delta)
        )

    loss = elementwise(values)
    if clip_range is not None:
        old = old_values.detach()
        v_clipped = old + torch.clamp(values - old, -clip_range, clip_range)
        loss = torch.max(loss, elementwise(v_clipped))
    return masked_mean(loss, mask)
