"""Proximal log-probs: the trainer's own log-probs of a batch's decisions at the weights the
update starts from, for the decoupled objective (``docs/maths.md``, "Stale rollouts" and "Engine
mismatch").

Two kinds of decisions need them. Stale ones (asynchronous training) were sampled by older
adapters; decisions from another engine or precision (vLLM, 16-bit weights) carry that engine's
log-probs, which differ from the update's recomputation even at equal weights. Either way the
update takes its ratio against π_prox and weights each entry by π_prox/π_behav, bounded
(:func:`~marft_algos.common.behaviour_weights.behaviour_weights`).

:func:`attach_proximal` gives decisions those log-probs: from one forward pass without gradient,
or, where the update takes one optimizer step per agent and no mismatch is measured, from the
update's own forward (the decisions are marked ``proximal_from_update``).
:func:`logprob_mismatch` measures how far the engine's log-probs are from the trainer's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from marft_algos.rollout.collector import Decision, Episode

__all__ = [
    "attach_proximal",
    "correct_engine",
    "corrects_engine",
    "logprob_mismatch",
    "trained_decisions",
]


def trained_decisions(trainer: Any, episodes: Sequence[Episode]) -> list[Decision]:
    """The trained agents' decisions of ``episodes`` whose loss terms can have a gradient: all of
    them, unless the trainer names fewer (``decisions_with_gradient``; critic-free: the non-zero
    advantages; the others add exactly 0 and need no proximal log-probs)."""
    agents = set(trainer.trainable_agents())
    chooser = getattr(trainer, "decisions_with_gradient", None)
    chosen = chooser(list(episodes)) if chooser is not None else None
    pool = [d for e in episodes for d in e.decisions] if chosen is None else chosen
    return [d for d in pool if d.agent in agents]


def correct_engine(trainer: Any, episodes: Sequence[Episode]) -> dict[str, float]:
    """Give every trained decision of ``episodes`` the trainer's log-probs at the update's
    starting weights (one pass without gradient), so the update weights each entry by
    π_trainer/π_engine; returns :func:`logprob_mismatch` of the decisions those weights sampled
    (stale ones, sampled by older adapters, are left out of it)."""
    pool = trained_decisions(trainer, episodes)
    log_probs = attach_proximal(trainer, pool, own_forward=False)
    fresh = [
        k
        for k, d in enumerate(pool)
        if d.policy_version is None or d.policy_version == trainer.iteration
    ]
    recomputed = log_probs[fresh] if log_probs is not None else torch.zeros(0, 0)
    return logprob_mismatch([pool[k] for k in fresh], recomputed, trainer.dist)


def attach_proximal(
    trainer: Any, decisions: Sequence[Decision], *, own_forward: bool
) -> torch.Tensor | None:
    """Give ``decisions`` their log-probs under the trainer's current weights and sampling
    distribution.

    Args:
        trainer: A :class:`~marft_algos.trainers.base.Trainer`.
        decisions: Decisions of its trained agents.
        own_forward: Mark them ``proximal_from_update`` (the update's single forward runs on these
            weights) instead of running a pass.

    Returns:
        ``(N, T)`` the log-probs of the pass (0 on padding), rows in ``decisions``' order; None
        when marked or when there is nothing to compute.
    """
    if not decisions:
        return None
    if own_forward:
        for decision in decisions:
            decision.proximal_from_update = True
        return None
    batch = trainer.rollout_batch([Episode(seed=0, options={}, decisions=list(decisions))])
    log_probs = trainer.policy_gradient().current_log_probs(batch)  # (N, T)
    for k, decision in enumerate(decisions):
        decision.proximal_log_probs = log_probs[k, : len(decision.action_ids)].tolist()
        decision.proximal_from_update = False
    return log_probs


def corrects_engine(config: Any, policy: Any, rollout_backend: Any) -> bool:
    """Whether a run corrects its rollouts' engine mismatch (``config.engine_correction``:
    ``"auto"`` is on when another engine samples, a rollout backend such as vLLM, or the policy
    computes in 16 bits, where decoding and the update's forward round differently)."""
    setting = config.engine_correction
    if setting != "auto":
        return setting == "on"
    if rollout_backend is not None:
        return True
    return bool(_frozen_dtypes(policy) & {torch.float16, torch.bfloat16})


def _frozen_dtypes(policy: Any) -> set[torch.dtype]:
    """The dtypes of the policy's frozen (base model) weights."""
    out: set[torch.dtype] = set()
    backbone_of = getattr(policy, "backbone", None)
    if backbone_of is None:
        return out
    for agent in policy.agents:
        model = getattr(backbone_of(agent), "model", None)
        if model is not None:
            out |= {p.dtype for p in model.parameters() if not p.requires_grad}
    return out


def logprob_mismatch(
    decisions: Sequence[Decision], recomputed: torch.Tensor, dist: Any
) -> dict[str, float]:
    """``rollout/logprob_mismatch_*``: |log π_trainer − log π_engine| over the tokens of
    ``decisions``, pooled and per agent (summed and maxed over every process).

    Args:
        decisions: Decisions sampled by the weights of ``recomputed`` (fresh ones).
        recomputed: ``(N, T)`` the trainer's log-probs of them (:func:`attach_proximal`).
        dist: The run's :class:`~marft_algos.distributed.DistributedContext`.

    Returns:
        ``rollout/logprob_mismatch_mean`` and ``_max`` (and ``/<agent>`` of each), and
        ``rollout/logprob_mismatch_cut``: the share of tokens the trainer's top-k/top-p cut
        excludes (infinite mismatch, left out of the mean and max).
    """
    agents = sorted({d.agent for d in decisions})
    agents = sorted({a for part in dist.gather(agents) for a in part})
    sums = {a: [0.0, 0.0, 0.0] for a in agents}  # |Δ| sum, finite tokens, cut tokens
    peaks = dict.fromkeys(agents, 0.0)
    for k, d in enumerate(decisions):
        n = len(d.action_ids)
        gap = (recomputed[k, :n] - torch.tensor(d.log_probs, dtype=torch.float32)).abs()
        finite = torch.isfinite(gap)
        own = sums[d.agent]
        own[0] += float(gap[finite].sum())
        own[1] += float(finite.sum())
        own[2] += float((~finite).sum())
        if bool(finite.any()):
            peaks[d.agent] = max(peaks[d.agent], float(gap[finite].max()))
    flat = dist.sum([v for a in agents for v in sums[a]])
    maxed = dist.max([peaks[a] for a in agents])
    out: dict[str, float] = {}
    total = [0.0, 0.0, 0.0]
    for i, agent in enumerate(agents):
        gap_sum, finite, cut = flat[3 * i : 3 * i + 3]
        total = [total[0] + gap_sum, total[1] + finite, total[2] + cut]
        if finite:
            out[f"rollout/logprob_mismatch_mean/{agent}"] = gap_sum / finite
            out[f"rollout/logprob_mismatch_max/{agent}"] = maxed[i]
    if total[1]:
        out["rollout/logprob_mismatch_mean"] = total[0] / total[1]
        out["rollout/logprob_mismatch_max"] = max(maxed, default=0.0)
    if total[1] + total[2]:
        out["rollout/logprob_mismatch_cut"] = total[2] / (total[1] + total[2])
    return out
