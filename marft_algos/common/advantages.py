"""Advantage estimators for MARFT: action-level and token-level GAE, discounted returns and the
advantages' normalisation. The critic-free group advantages of GRPO and RLOO and the KL-penalised
returns of REINFORCE++ live in :mod:`marft_algos.common.critic_free_advantages` (importable
from here too).

Pure functions on torch tensors: no environment, model or trainer imports.

Flattened decision sequence
---------------------------
A multi-agent round (one env timestep t, paper §3.1) is flattened into the sequence of decisions
taken in the realised order, so that a round scheduled by a router may hold any number of agents
(1..n) and rounds of one env need not have the same length. For a batch of ``B`` envs padded to
``T`` decisions, every tensor is ``(B, T)`` (a single env may also pass ``(T,)``):

* ``rewards[b, k]``: the reward that lands on decision ``k`` — ``r_t^i`` for agent ``i``; the team
  reward ``r_t`` of the round lands on the last decision of the round (or on every agent's
  decision, if the task's credit rule says so: the estimator does not care who put it there).
* ``values[b, k]``: the critic's ``V(ô^i_t)`` for the decision.
* ``round_end[b, k]``: ``True`` if the decision is the last one of its round, i.e. the env applied
  its transition after it.
* ``dones[b, k]``: ``True`` if the episode ended after this decision's round. Only read where
  ``round_end`` is ``True``; elsewhere it is ignored, so a per-agent copy of the round's done flag
  (every agent of a finished round marked done) is also accepted.
* ``bootstrap_value[b]``: the value of the first decision after the sequence (the decision the
  rollout stopped before); ignored if the sequence's last decision ended an episode.
* ``valid[b, k]``: ``False`` on padding. Padding may sit anywhere: the recursion steps over it, and
  advantages and returns are 0 there.

The token-level estimator uses the same layout with one entry per generated token and an extra
``action_end`` marker (see :func:`token_level_gae`).
"""

from __future__ import annotations

import torch
from torch import Tensor

from marft_algos.common.critic_free_advantages import (
    ScaleRewards,
    group_advantages,
    kl_penalized_returns,
    leave_one_out_advantages,
    zero_std_group_mask,
)
from marft_algos.common.layouts import flatten_action_tokens

__all__ = [
    "ScaleRewards",
    "action_level_gae",
    "discounted_returns",
    "flatten_action_tokens",
    "group_advantages",
    "kl_penalized_returns",
    "leave_one_out_advantages",
    "normalize_advantages",
    "token_level_gae",
    "zero_std_group_mask",
]


def _as_batch(x: Tensor, name: str, squeeze: bool) -> Tensor:
    """Return ``x`` as ``(B, T)``; a 1-D sequence is one env."""
    if squeeze:
        x = x.unsqueeze(0)
    if x.dim() != 2:
        raise ValueError(
            f"{name} must have shape (T,) or (B, T), got {tuple(x.shape)}; "
            "flatten each env's decisions into one sequence (see the module docstring)."
        )
    return x


def _prepare(
    rewards: Tensor,
    values: Tensor | None,
    markers: dict[str, Tensor],
    bootstrap_value: Tensor | float | None,
    valid: Tensor | None,
) -> tuple[bool, Tensor, Tensor, dict[str, Tensor], Tensor, Tensor]:
    """Validate shapes and bring everything to float ``(B, T)`` / bool ``(B, T)`` / ``(B,)``."""
    squeeze = rewards.dim() == 1
    # Advantages are targets: never backpropagate through them. Keep float64 if given.
    dtype = rewards.dtype if rewards.is_floating_point() else torch.float32
    rewards = _as_batch(rewards.detach(), "rewards", squeeze).to(dtype)
    shape = rewards.shape
    if values is None:
        values = torch.zeros(shape, dtype=dtype, device=rewards.device)
    else:
        values = _as_batch(values.detach(), "values", squeeze).to(dtype)
    out: dict[str, Tensor] = {}
    for name, m in markers.items():
        out[name] = _as_batch(m, name, squeeze).bool()
    valid = (
        torch.ones(shape, dtype=torch.bool)
        if valid is None
        else _as_batch(valid, "valid", squeeze).bool()
    )
    for name, t in [("values", values), ("valid", valid), *out.items()]:
        if t.shape != shape:
            raise ValueError(f"{name} has shape {tuple(t.shape)} but rewards has {tuple(shape)}")
    values = values.to(rewards.device)
    valid = valid.to(rewards.device)
    out = {k: v.to(rewards.device) for k, v in out.items()}
    if bootstrap_value is None:
        boot = torch.zeros(shape[0], dtype=dtype, device=rewards.device)
    else:
        boot = torch.as_tensor(bootstrap_value, device=rewards.device).detach().to(dtype)
        boot = boot.reshape(-1).expand(shape[0]) if boot.numel() == 1 else boot.reshape(-1)
        if boot.shape[0] != shape[0]:
            raise ValueError(
                f"bootstrap_value must have one entry per env ({shape[0]}), got {boot.shape[0]}"
            )
    return squeeze, rewards, values, out, boot, valid


def _gae_backward(
    rewards: Tensor,
    values: Tensor,
    discounts: Tensor,
    lambdas: Tensor,
    bootstrap_value: Tensor,
    valid: Tensor,
) -> tuple[Tensor, Tensor]:
    """Generic GAE recursion over a flattened sequence.

    ``discounts[b, k]`` is the factor between step ``k`` and the next valid step (already 0 where
    the episode ended, so both the bootstrap and the GAE trace stop there); ``lambdas[b, k]`` the
    trace factor on the same edge. δ_k = r_k + d_k·V_{k+1} − V_k and A_k = δ_k + d_k·l_k·A_{k+1}.
    """
    batch, length = rewards.shape
    advantages = torch.zeros_like(rewards)  # (B, T)
    next_value = bootstrap_value.clone()  # (B,) value of the next valid step
    next_adv = torch.zeros(batch, dtype=rewards.dtype, device=rewards.device)  # (B,)
    for k in reversed(range(length)):
        d = discounts[:, k]
        delta = rewards[:, k] + d * next_value - values[:, k]
        adv = delta + d * lambdas[:, k] * next_adv
        ok = valid[:, k]
        # Padding is transparent: the step before it links to the step after it.
        advantages[:, k] = torch.where(ok, adv, torch.zeros_like(adv))
        next_value = torch.where(ok, values[:, k], next_value)
        next_adv = torch.where(ok, adv, next_adv)
    returns = torch.where(valid, values + advantages, torch.zeros_like(values))
    return advantages, returns


def _edge_factors(
    round_end: Tensor,
    dones: Tensor,
    gamma: float,
    lam: float,
    intra_round_discount: bool,
    inner_gamma: float | None = None,
    inner_lam: float | None = None,
    inner: Tensor | None = None,
    dtype: torch.dtype = torch.float32,
) -> tuple[Tensor, Tensor]:
    """Per-edge discount and trace factors for the flattened sequence.

    Three kinds of edge leave a step: within an action (``inner`` True, token level only), between
    agents of one round, and from a round's last step to the next round (masked at episode end).
    """
    between_g = gamma if intra_round_discount else 1.0
    between_l = lam if intra_round_discount else 1.0
    ended = (round_end & dones).to(dtype)
    disc = torch.where(round_end, gamma * (1.0 - ended), torch.full_like(ended, between_g))
    lams = torch.where(round_end, torch.full_like(ended, lam), torch.full_like(ended, between_l))
    if inner is not None:
        assert inner_gamma is not None and inner_lam is not None
        disc = torch.where(inner, torch.full_like(disc, inner_gamma), disc)
        lams = torch.where(inner, torch.full_like(lams, inner_lam), lams)
    return disc, lams


def _finish(squeeze: bool, *tensors: Tensor) -> tuple[Tensor, ...]:
    return tuple(t.squeeze(0) if squeeze else t for t in tensors)


def action_level_gae(
    rewards: Tensor,
    values: Tensor,
    round_end: Tensor,
    dones: Tensor,
    bootstrap_value: Tensor | float | None = None,
    *,
    gamma: float,
    lam: float,
    valid: Tensor | None = None,
    intra_round_discount: bool = True,
) -> tuple[Tensor, Tensor]:
    """Action-level MARFT GAE over the flattened agent sequence (paper §4.1.1, Algorithm 3, App. A).

    For decision ``i`` of round ``t`` with agents ``1..n`` acting in the realised order:

    * ``i < n``: δ = r_t^i + γ·V(ô^{i+1}_t) − V(ô^i_t), A = δ + γλ·A(ô^{i+1}_t);
    * ``i = n``: δ = r_t + γ·V(ô^1_{t+1})·(1 − done_t) − V(ô^n_t),
      A = δ + γλ·(1 − done_t)·A(ô^1_{t+1});

    and the return target is V + A. The round length ``n`` may change from round to round.

    Args:
        rewards: ``(B, T)`` or ``(T,)`` reward landing on each decision.
        values: ``(B, T)`` critic values ``V(ô^i_t)`` of the decisions.
        round_end: ``(B, T)`` bool, the decision is the last of its round.
        dones: ``(B, T)`` bool, the episode ended after this decision's round (read only where
            ``round_end``).
        bootstrap_value: ``(B,)`` value of the decision after the last one (0 if unknown or if the
            episode ended). A scalar is broadcast.
        gamma: discount γ.
        lam: GAE λ.
        valid: ``(B, T)`` bool, ``False`` on padding (default: all valid).
        intra_round_discount: if ``True`` (the paper's reference loop), γ and λ also apply between
            agents inside a round; if ``False`` they are 1 there, so a round counts as one timestep
            of discount whatever its number of agents.

    Returns:
        ``(advantages, returns)``, each shaped like ``rewards``; 0 on padding.
    """
    squeeze, r, v, marks, boot, ok = _prepare(
        rewards, values, {"round_end": round_end, "dones": dones}, bootstrap_value, valid
    )
    disc, lams = _edge_factors(
        marks["round_end"], marks["dones"], gamma, lam, intra_round_discount, dtype=r.dtype
    )
    adv, ret = _gae_backward(r, v, disc, lams, boot, ok)
    a, b = _finish(squeeze, adv, ret)
    return a, b


def token_level_gae(
    rewards: Tensor,
    values: Tensor,
    action_end: Tensor,
    round_end: Tensor,
    dones: Tensor,
    bootstrap_value: Tensor | float | None = None,
    *,
    gamma: float,
    lam: float,
    gamma_token: float = 1.0,
    lam_token: float | None = None,
    valid: Tensor | None = None,
    intra_round_discount: bool = True,
) -> tuple[Tensor, Tensor]:
    """Token-level MARFT GAE: token-level Bellman backup with GAE per token (paper §4.1.2, §4.2.2).

    Every generated token is an action with its own value. The flat token sequence of an env holds
    the tokens of every agent's action, in the realised order, round after round. Edges:

    * inside an action (token j → j+1 of agent i): discount ``gamma_token``, trace ``lam_token``;
    * last token of agent i → first token of agent i+1 in the same round: ``gamma`` and ``lam``
      (1 and 1 with ``intra_round_discount=False``);
    * last token of the round's last agent → first token of the next round: ``gamma`` and ``lam``,
      masked by ``1 − done``.

    Rewards land where the caller puts them: per-agent rewards ``r_t^i`` on agent ``i``'s last
    token, the round's reward ``r_t`` on the last token of the round.

    ``gamma_token`` defaults to 1: an action of 500 tokens discounted per token at 0.99 would pass
    only 0.99^500 ≈ 0.007 of the reward to its first token, so the discount would measure length,
    not time. ``lam_token`` defaults to ``lam``.

    Args:
        rewards: ``(B, L)`` or ``(L,)`` reward on each token (usually non-zero only on last tokens).
        values: ``(B, L)`` per-token critic values.
        action_end: ``(B, L)`` bool, the token is the last token of its agent's action.
        round_end: ``(B, L)`` bool, the token is the last token of its round (implies action end).
        dones: ``(B, L)`` bool, the episode ended after this token's round (read only where
            ``round_end``).
        bootstrap_value: ``(B,)`` value of the token after the sequence (0 if the episode ended).
        gamma: discount between actions.
        lam: GAE λ between actions.
        gamma_token: discount between tokens of one action.
        lam_token: GAE λ between tokens of one action (default ``lam``).
        valid: ``(B, L)`` bool, ``False`` on padding (e.g. pad tokens after a short action).
        intra_round_discount: as in :func:`action_level_gae`.

    Returns:
        ``(advantages, returns)``, each shaped like ``rewards``; 0 on padding.

    With one token per action this is exactly :func:`action_level_gae`.
    """
    squeeze, r, v, marks, boot, ok = _prepare(
        rewards,
        values,
        {"action_end": action_end, "round_end": round_end, "dones": dones},
        bootstrap_value,
        valid,
    )
    ends = marks["round_end"]
    inner = ~(marks["action_end"] | ends)
    disc, lams = _edge_factors(
        ends,
        marks["dones"],
        gamma,
        lam,
        intra_round_discount,
        inner_gamma=gamma_token,
        inner_lam=lam if lam_token is None else lam_token,
        inner=inner,
        dtype=r.dtype,
    )
    adv, ret = _gae_backward(r, v, disc, lams, boot, ok)
    a, b = _finish(squeeze, adv, ret)
    return a, b


def discounted_returns(
    rewards: Tensor,
    round_end: Tensor,
    dones: Tensor,
    bootstrap_value: Tensor | float | None = None,
    *,
    gamma: float,
    valid: Tensor | None = None,
    intra_round_discount: bool = True,
) -> Tensor:
    """Discounted return of every decision of the flattened sequence (Monte-Carlo target).

    G_k = r_k + γ_k·G_{k+1} with the same edges and episode masking as :func:`action_level_gae`
    (which it equals with zero values and λ = 1). Pass ``round_end`` all ``True`` for a plain
    single-agent sequence.

    Args:
        rewards: ``(B, T)`` or ``(T,)`` rewards.
        round_end: ``(B, T)`` bool round ends.
        dones: ``(B, T)`` bool episode ends (read only where ``round_end``).
        bootstrap_value: ``(B,)`` value after the sequence (0 by default).
        gamma: discount γ.
        valid: ``(B, T)`` bool padding mask.
        intra_round_discount: as in :func:`action_level_gae`.

    Returns:
        Returns shaped like ``rewards``; 0 on padding.
    """
    _, ret = action_level_gae(
        rewards,
        torch.zeros_like(
            rewards, dtype=rewards.dtype if rewards.is_floating_point() else torch.float32
        ),
        round_end,
        dones,
        bootstrap_value,
        gamma=gamma,
        lam=1.0,
        valid=valid,
        intra_round_discount=intra_round_discount,
    )
    return ret


def normalize_advantages(
    advantages: Tensor,
    mask: Tensor | None = None,
    *,
    ignore_zeros: bool = False,
    eps: float = 1e-8,
    unbiased: bool = False,
) -> Tensor:
    """Batch normalisation of advantages: (A − mean) / (std + eps) over the valid entries.

    The std is the population std (n, not n − 1), or with ``unbiased=True`` the sample std
    (n − 1, ``torch.std``'s default, as TRL's RLOO). A batch whose advantages are all equal (up to
    float round-off: std within a few ulps of the largest magnitude) carries no ranking and returns
    zeros, instead of dividing round-off noise by a near-zero std. With ``ignore_zeros=True`` the mean and std are
    taken over the valid entries that are not exactly 0 (entries of agents or steps that carry no
    estimate), as in the paper's Appendix A trainer; the normalisation is still applied to every
    valid entry. Entries outside ``mask`` are returned as 0.

    Args:
        advantages: advantages of any shape.
        mask: bool tensor of the same shape, ``True`` where valid (default: all).
        ignore_zeros: leave exact zeros out of the statistics.
        eps: added to the std.
        unbiased: divide the sum of squares by n − 1 instead of n.

    Returns:
        Normalised advantages, same shape.
    """
    adv = advantages.float()
    valid = torch.ones_like(adv, dtype=torch.bool) if mask is None else mask.bool().expand_as(adv)
    stats = valid & (adv != 0) if ignore_zeros else valid
    n = stats.sum()
    if n == 0:
        return torch.where(valid, adv, torch.zeros_like(adv))
    kept = torch.where(stats, adv, torch.zeros_like(adv))  # where, not multiply: pads may be NaN
    mean = kept.sum() / n
    var = torch.where(stats, (adv - mean) ** 2, torch.zeros_like(adv)).sum() / n
    scale = torch.where(stats, adv.abs(), torch.zeros_like(adv)).max()
    if var.sqrt() <= 16 * torch.finfo(adv.dtype).eps * scale:  # equal up to round-off (or n = 1)
        return torch.zeros_like(adv)
    std = (var * n / (n - 1)).sqrt() if unbiased else var.sqrt()
    out = (adv - mean) / (std + eps)
    return torch.where(valid, out, torch.zeros_like(out))
