"""The update statistics both update loops log, reduced one way (meanings: :data:`~marft_algos.runs.metrics.METRICS`).

:class:`UpdateStats` collects the results of an update's policy steps (and critic steps) and
turns them into the ``train/`` metrics; :func:`advantage_abs_mean` measures the advantages an
update trains on. The actor-critic loop (:mod:`marft_algos.trainers.actor_critic`) and the
critic-free loop (:mod:`marft_algos.trainers.critic_free`) both use them, so a name means the same
in every trainer.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from marft_algos.distributed import DistributedContext

__all__ = [
    "UpdateStats",
    "advantage_abs_mean",
    "agent_advantages",
    "device_peak_gib",
    "peak_metrics",
]

#: Step results averaged over the update's policy steps.
_MEANS = ("policy_loss", "entropy", "ratio_mean", "approx_kl_after", "grad_norm")
#: Step results counted over the update's policy steps.
_COUNTS = ("skipped_nonfinite", "skipped_trust_region")


class UpdateStats:
    """The statistics of one update's steps, as ``train/`` metrics.

    Args:
        agents: The agents whose adapters the update trains (``train/agents``).
        with_kl: Average the steps' ``kl`` (the objective has a KL term to the reference) into
            ``train/kl``.
    """

    def __init__(self, agents: Sequence[str], *, with_kl: bool = False) -> None:
        self.agents = list(agents)
        self.with_kl = with_kl
        self.steps = 0
        self._means: dict[str, list[float]] = defaultdict(list)
        self._counts = dict.fromkeys(_COUNTS, 0)
        self._first: Mapping[str, Any] | None = None
        self._last: Mapping[str, Any] | None = None
        #: Per agent (``policy_loss``, ``entropy``) or adapter (``grad_norm``): the steps' values.
        self._own: dict[tuple[str, str], list[float]] = defaultdict(list)

    def add_value_loss(self, loss: float) -> None:
        """One critic step's value loss."""
        self._means["value_loss"].append(loss)

    def add_step(self, result: Mapping[str, Any]) -> None:
        """One policy step's result (:meth:`~marft_algos.trainers.base.Trainer.policy_step`)."""
        self.steps += 1
        if self._first is None:
            self._first = result
        self._last = result
        for key in (*_MEANS, "kl") if self.with_kl else _MEANS:
            if key in result:
                self._means[key].append(result[key])
        for key in _COUNTS:
            self._counts[key] += int(result.get(key, 0))
        for agent, values in result.get("per_agent", {}).items():
            for key in ("policy_loss", "entropy"):
                self._own[key, agent].append(values[key])
        if result.get("skipped_nonfinite", 0) == 0:  # a skipped step's gradient was dropped
            for adapter, norm in result.get("grad_norms", {}).items():
                self._own["grad_norm", adapter].append(norm)

    def metrics(self) -> dict[str, Any]:
        """The ``train/`` metrics; statistics of policy steps are absent when none was taken."""
        out: dict[str, Any] = {f"train/{k}": float(np.mean(v)) for k, v in self._means.items() if v}
        if self._first is not None and self._last is not None:
            out["train/approx_kl"] = self._first["approx_kl"]
            out["train/clip_fraction"] = self._first["clip_fraction"]
            out["train/approx_kl_last"] = self._last["approx_kl"]
            for agent, values in self._first.get("per_agent", {}).items():
                out[f"train/approx_kl/{agent}"] = values["approx_kl"]
                out[f"train/clip_fraction/{agent}"] = values["clip_fraction"]
        for (key, name), values in sorted(self._own.items()):
            out[f"train/{key}/{name}"] = float(np.mean(values))
        out.update({f"train/{k}": v for k, v in self._counts.items()})
        out["train/skipped_empty"] = int(self.steps == 0)
        out["train/agents"] = ",".join(sorted(self.agents))
        return out


def advantage_abs_mean(
    advantages: Tensor, entries: Tensor, distributed: DistributedContext
) -> dict[str, float]:
    """``train/advantage_abs_mean``: the mean absolute advantage over ``entries`` of every rank.

    Args:
        advantages: ``(N,)`` one per decision, or ``(N, T)`` one per token.
        entries: Bool, ``(N,)`` (action level) or ``(N, T)`` (token level): the entries the
            objective trains on. A ``(N,)`` advantage counts once per token of its decision at
            token level.
        distributed: Sums over ranks.

    Returns:
        The metric, or nothing when no rank has an entry.
    """
    adv = advantages.abs().float()
    if adv.dim() < entries.dim():
        adv = adv.unsqueeze(-1).expand(entries.shape)  # (N, T): the decision's A on each token
    adv = adv[..., : entries.shape[-1]] if entries.dim() == 2 else adv
    total, count = distributed.sum([float(adv[entries].sum()), float(entries.sum())])
    return {"train/advantage_abs_mean": total / count} if count else {}


def agent_advantages(
    advantages: Tensor,
    entries: Tensor,
    batch_agents: Sequence[str],
    agents: Sequence[str],
    distributed: DistributedContext,
) -> dict[str, float]:
    """``train/advantage_mean/<agent>`` and ``train/advantage_abs_mean/<agent>``: each agent's
    mean advantage and mean absolute advantage over its ``entries`` of every rank.

    Args:
        advantages: ``(N,)`` or ``(N, T)``, as :func:`advantage_abs_mean`.
        entries: ``(N,)`` or ``(N, T)`` bool, as :func:`advantage_abs_mean`.
        batch_agents: The agent of each of the ``N`` rows.
        agents: Every agent that may have rows (the same list on every rank).
        distributed: Sums over ranks.
    """
    adv = advantages.float()
    if adv.dim() < entries.dim():
        adv = adv.unsqueeze(-1).expand(entries.shape)  # (N, T): the decision's A on each token
    adv = adv[..., : entries.shape[-1]] if entries.dim() == 2 else adv
    sums: list[float] = []
    for agent in agents:
        rows = torch.tensor([a == agent for a in batch_agents], dtype=torch.bool)
        mine = entries & (rows if entries.dim() == 1 else rows.unsqueeze(-1))
        values = adv[mine]
        sums += [float(values.sum()), float(values.abs().sum()), float(mine.sum())]
    totals = distributed.sum(sums)
    out: dict[str, float] = {}
    for k, agent in enumerate(agents):
        total, absolute, count = totals[3 * k : 3 * k + 3]
        if count:
            out[f"train/advantage_mean/{agent}"] = total / count
            out[f"train/advantage_abs_mean/{agent}"] = absolute / count
    return out


def device_peak_gib(dist: DistributedContext) -> float | None:
    """The most device memory this process has held in tensors since the last call, GiB
    (``torch.cuda.max_memory_allocated``), and the count restarted; None on a CPU."""
    if dist.device.type != "cuda":
        return None
    peak = torch.cuda.max_memory_allocated(dist.device) / 2**30
    torch.cuda.reset_peak_memory_stats(dist.device)
    return peak


def peak_metrics(dist: DistributedContext, **peaks: float | None) -> dict[str, float]:
    """``memory/<phase>_peak_gib`` for each phase's :func:`device_peak_gib`, the largest over
    the processes (one collective on a GPU); ``{}`` on a CPU."""
    if dist.device.type != "cuda":
        return {}
    phases = list(peaks)
    largest = dist.max([float(peaks[phase] or 0.0) for phase in phases])
    return {f"memory/{phase}_peak_gib": value for phase, value in zip(phases, largest, strict=True)}


def token_count_metrics(
    counters: Sequence[Any], dist: DistributedContext, name: str
) -> dict[str, int]:
    """``<name>`` and ``<name>_saved`` since the last call: the prompt tokens the counters
    (:class:`~marft_algos.policy.prefix_cache.PrefillCounter`; None skipped) saw run through a
    model and not run (repeated prompts, shared beginnings, a prefix cache), summed over the
    processes. ``{}`` when nothing was counted (an engine or worker without counters generated)."""
    tokens = saved = 0
    for counter in counters:
        if counter is not None:
            more, spared = counter.take()
            tokens, saved = tokens + more, saved + spared
    tokens, saved = (int(v) for v in dist.sum([tokens, saved]))
    if tokens + saved == 0:
        return {}
    return {name: tokens, f"{name}_saved": saved}
