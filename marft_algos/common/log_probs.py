"""Per-token statistics of log-probs: masked means, the KL estimators (k1, k2, k3), entropies and
an action's log-prob from its tokens (paper eqs. 2 and 6).

Pure functions on torch tensors: no environment, model or trainer imports.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

__all__ = [
    "KLEstimator",
    "action_log_prob",
    "approx_kl",
    "entropy_from_log_probs",
    "entropy_from_logits",
    "kl_k3",
    "kl_penalty",
    "masked_mean",
]


def masked_mean(x: Tensor, mask: Tensor | None = None, dim: int | None = None) -> Tensor:
    """Mean of ``x`` over the entries where ``mask`` is ``True`` (all entries if ``mask`` is None).

    Args:
        x: values.
        mask: bool (or 0/1) tensor broadcastable to ``x``.
        dim: reduce over this dimension only (default: all).

    Returns:
        The masked mean; 0 where no entry is valid (instead of NaN).
    """
    if mask is None:
        return x.mean() if dim is None else x.mean(dim)
    valid = mask.bool().expand_as(x)
    # where, not multiply: pad entries may hold inf/NaN (e.g. log-probs of masked tokens).
    kept = torch.where(valid, x, torch.zeros_like(x))
    count = valid.to(x.dtype)
    if dim is None:
        return kept.sum() / count.sum().clamp(min=1.0)
    return kept.sum(dim) / count.sum(dim).clamp(min=1.0)


def kl_k3(log_probs: Tensor, ref_log_probs: Tensor) -> Tensor:
    """Per-token k3 estimator of KL(π_θ ‖ π_ref), as in GRPO (paper eq. 2).

    k3 = exp(ref − lp) − (ref − lp) − 1 with tokens sampled from π_θ: unbiased, and ≥ 0 for every
    sample because e^x ≥ 1 + x.

    Args:
        log_probs: log π_θ of the sampled tokens, any shape.
        ref_log_probs: log π_ref of the same tokens, same shape.

    Returns:
        Per-element estimate, same shape.
    """
    diff = ref_log_probs - log_probs
    return torch.exp(diff) - diff - 1.0


KLEstimator = Literal["k1", "k2", "k3"]


def kl_penalty(log_probs: Tensor, ref_log_probs: Tensor, estimator: KLEstimator = "k1") -> Tensor:
    """Per-token estimate of KL(π ‖ π_ref) on tokens sampled from π, for a KL penalty in the reward.

    With x = log π − log π_ref (Schulman's estimators, as OpenRLHF's ``--kl_estimator``):

    * ``"k1"``: x — REINFORCE++ (the paper's KL term) and TRL's RLOO; unbiased, may be negative per token;
    * ``"k2"``: x²/2 — biased, never negative;
    * ``"k3"``: e^{−x} − 1 + x — unbiased, never negative (:func:`kl_k3`).

    Args:
        log_probs: log π of the sampled tokens (the rollout policy's), any shape.
        ref_log_probs: log π_ref of the same tokens, same shape.
        estimator: ``"k1"``, ``"k2"`` or ``"k3"``.

    Returns:
        Per-element estimate, same shape.
    """
    if estimator == "k1":
        return log_probs - ref_log_probs
    if estimator == "k2":
        return 0.5 * (log_probs - ref_log_probs) ** 2
    if estimator == "k3":
        return kl_k3(log_probs, ref_log_probs)
    raise ValueError(f"kl estimator must be 'k1', 'k2' or 'k3', got {estimator!r}")


def approx_kl(log_probs: Tensor, old_log_probs: Tensor, mask: Tensor | None = None) -> Tensor:
    """Masked mean of the k3 estimator of KL(π_old ‖ π_θ) on samples from π_old.

    With r = π_θ / π_old: (r − 1) − log r, the non-negative low-variance estimator used for PPO
    diagnostics and for the paper's trust-region hard cut (Appendix A).

    Args:
        log_probs: log π_θ of the sampled actions or tokens.
        old_log_probs: log π_old (rollout) of the same.
        mask: bool mask of valid entries.

    Returns:
        Scalar estimate.
    """
    return masked_mean(kl_k3(old_log_probs, log_probs), mask)


def entropy_from_logits(logits: Tensor) -> Tensor:
    """Entropy of the categorical distribution at every position, computed stably.

    H = −Σ p·log p with log p from ``log_softmax`` (no exp overflow); entries whose logit is −inf
    (tokens cut by top-k / top-p) contribute 0, and so does their gradient (no NaN).

    Args:
        logits: ``(..., vocab)`` unnormalised logits.

    Returns:
        ``(...)`` entropies in nats.
    """
    return entropy_from_log_probs(torch.log_softmax(logits.float(), dim=-1))


def entropy_from_log_probs(log_probs: Tensor) -> Tensor:
    """Entropy ``−Σ p·log p`` over the last dimension of normalised log-probs.

    Entries with log-prob −inf (p = 0) add exactly 0. The product is taken on a copy where those
    entries are 0, because ``where(p > 0, p·log p, 0)`` alone still back-propagates ``0·(−inf)``
    = NaN into the gradient.
    """
    finite = torch.isfinite(log_probs)
    safe = torch.where(finite, log_probs, torch.zeros_like(log_probs))
    return -torch.where(finite, safe.exp() * safe, torch.zeros_like(safe)).sum(-1)


def action_log_prob(
    token_log_probs: Tensor,
    mask: Tensor | None = None,
    normalization: Literal["none", "token", "word"] = "none",
    word_counts: Tensor | None = None,
) -> Tensor:
    """Log-probability of a whole action from its tokens (paper eq. 6 and §4.1.1 normalisation).

    log P(a^i | ô^i, a^{1:i−1}) = Σ_j log P(w^{i,j} | ...). Long actions have lower joint
    probability whatever their merit, so the sum may be divided by a length Z: the number of tokens
    (``"token"``) or of words (``"word"``, counts given by the caller, since words depend on the
    detokenised text).

    Args:
        token_log_probs: ``(B, L)`` log-probs of the generated tokens.
        mask: ``(B, L)`` bool, ``True`` on generated tokens (default: all).
        normalization: ``"none"``, ``"token"`` or ``"word"``.
        word_counts: ``(B,)`` word count of each action; required for ``"word"``.

    Returns:
        ``(B,)`` action log-probs.
    """
    m = torch.ones_like(token_log_probs) if mask is None else mask.to(token_log_probs.dtype)
    total = torch.where(m > 0, token_log_probs, torch.zeros_like(token_log_probs)).sum(-1)  # (B,)
    if normalization == "none":
        return total
    if normalization == "token":
        return total / m.sum(-1).clamp(min=1.0)
    if normalization == "word":
        if word_counts is None:
            raise ValueError(
                "normalization='word' needs word_counts, the number of words of each action"
            )
        return total / word_counts.to(total.dtype).clamp(min=1.0)
    raise ValueError(f"normalization must be 'none', 'token' or 'word', got {normalization!r}")
