"""The adapters' optimizers: one Adam per trainable adapter, and a clipped step over some of them."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence

import torch

from marft_algos.protocols import PolicyLike

__all__ = ["adapter_optimizers", "clip_and_step", "learning_rates"]

logger = logging.getLogger("marft_algos.trainers.base")


def adapter_optimizers(
    policy: PolicyLike,
    agents: Sequence[str],
    learning_rate: float,
    eps: float,
    agent_learning_rates: Mapping[str, float] | None = None,
) -> tuple[dict[str, torch.optim.Optimizer], dict[str, str]]:
    """One Adam per trainable adapter; agents sharing an adapter share its optimizer.

    Args:
        policy: The policy whose adapters train.
        agents: The env's agents, in order.
        learning_rate: Adam's learning rate for agents ``agent_learning_rates`` does not name.
        eps: Adam's epsilon.
        agent_learning_rates: Per-agent learning rates.

    Returns:
        ``(optimizers by key, agent → key)``; a frozen agent (no trainable parameters) has no key.

    Raises:
        ValueError: Every agent is frozen; a frozen agent is given a learning rate; or agents
            sharing an adapter are given different ones.
    """
    rates = dict(agent_learning_rates or {})
    optimizers: dict[str, torch.optim.Optimizer] = {}
    optimizer_of: dict[str, str] = {}
    seen: dict[int, str] = {}
    for agent in agents:
        params = policy.trainable_parameters(agent)
        if not params:
            if agent in rates:
                raise ValueError(
                    f"agent_learning_rates gives {agent!r} a learning rate, but it has no "
                    f"trainable parameters (frozen in the policy); drop it from "
                    f"agent_learning_rates."
                )
            continue
        key = seen.get(id(params[0]))
        if key is None:
            key = seen[id(params[0])] = agent
            lr = rates.get(agent, learning_rate)
            optimizers[key] = torch.optim.Adam(params, lr=lr, eps=eps)
        optimizer_of[agent] = key
    _check_shared_rates(optimizer_of, rates, learning_rate)
    if not optimizers:
        raise ValueError(
            "No agent has trainable parameters: every agent is frozen, so there is nothing to train."
        )
    return optimizers, optimizer_of


def _check_shared_rates(
    optimizer_of: Mapping[str, str], rates: Mapping[str, float], learning_rate: float
) -> None:
    """Refuse different learning rates for agents that share one adapter (one optimizer)."""
    groups: dict[str, list[str]] = {}
    for agent, key in optimizer_of.items():
        groups.setdefault(key, []).append(agent)
    for group in groups.values():
        given = {a: rates.get(a, learning_rate) for a in group}
        if len(set(given.values())) > 1:
            shown = ", ".join(
                f"{a}={lr:g}" + ("" if a in rates else " (learning_rate)")
                for a, lr in given.items()
            )
            raise ValueError(
                f"Agents {group} share one adapter, so one optimizer and one learning rate, but "
                f"agent_learning_rates gives them {shown}; give every agent of {group} the same "
                f"value."
            )


def learning_rates(
    optimizers: Mapping[str, torch.optim.Optimizer], optimizer_of: Mapping[str, str]
) -> dict[str, float]:
    """Each trainable agent's learning rate, as its optimizer holds it."""
    return {a: float(optimizers[k].param_groups[0]["lr"]) for a, k in optimizer_of.items()}


def clip_and_step(
    optimizers: Sequence[torch.optim.Optimizer], max_grad_norm: float
) -> tuple[float, bool]:
    """Clip each optimizer's gradients to ``max_grad_norm`` and step them all, unless a norm is
    not finite (then none steps).

    Returns:
        ``(sum of the norms before clipping, applied)``; the norm is NaN when nothing was applied.
    """
    norms = []
    for optimizer in optimizers:
        params = [p for group in optimizer.param_groups for p in group["params"]]
        norms.append(float(torch.nn.utils.clip_grad_norm_(params, max_grad_norm)))
    if not all(math.isfinite(n) for n in norms):
        logger.warning("Skipping a policy update: gradient norm is not finite (%s).", norms)
        return float("nan"), False
    for optimizer in optimizers:
        optimizer.step()
    return float(sum(norms)), True
