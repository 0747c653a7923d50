"""The adapters' optimizers: one Adam per trainable adapter, and a clipped step over some of them."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

import torch

from marft_algos.protocols import PolicyLike

__all__ = ["adapter_optimizers", "clip_and_step"]

logger = logging.getLogger("marft_algos.trainers.base")


def adapter_optimizers(
    policy: PolicyLike, agents: Sequence[str], learning_rate: float, eps: float
) -> tuple[dict[str, torch.optim.Optimizer], dict[str, str]]:
    """One Adam per trainable adapter; agents sharing an adapter share its optimizer.

    Returns:
        ``(optimizers by key, agent → key)``; a frozen agent (no trainable parameters) has no key.

    Raises:
        ValueError: Every agent is frozen.
    """
    optimizers: dict[str, torch.optim.Optimizer] = {}
    optimizer_of: dict[str, str] = {}
    seen: dict[int, str] = {}
    for agent in agents:
        params = policy.trainable_parameters(agent)
        if not params:
            continue
        key = seen.get(id(params[0]))
        if key is None:
            key = seen[id(params[0])] = agent
            optimizers[key] = torch.optim.Adam(params, lr=learning_rate, eps=eps)
        optimizer_of[agent] = key
    if not optimizers:
        raise ValueError(
            "No agent has trainable parameters: every agent is frozen, so there is nothing to train."
        )
    return optimizers, optimizer_of


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
