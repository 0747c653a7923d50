"""Training on branched episodes (the ``branch`` setting): which trainers take it, and the
advantages and metrics of a batch of branch trees (docs/maths.md, "Branched advantages").

Each requested episode grows into a tree (:mod:`marft_algos.rollout.branching`). A tree's node
paths are made unique over the batch by prefixing the task group: ``(group, request, w1, m1, ...)``,
so the trees of one task (``num_generations`` of them) are siblings under ``(group,)``. Each
decision's sample is ``(node, agent)``; its advantage comes from
:func:`~marft_algos.common.branching.branch_advantages` on the episodes' team returns.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Sequence
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor

from marft_algos.common.advantages import ScaleRewards
from marft_algos.common.batch import RolloutBatch
from marft_algos.common.branching import BranchPath, branch_advantages, branch_spread
from marft_algos.rollout.branch_settings import branch_levels, episodes_per_tree
from marft_algos.rollout.collector import Decision, Episode

__all__ = [
    "batch_branch_advantages",
    "check_branch",
    "describe_branching",
    "tree_size",
    "without_copies",
]

logger = logging.getLogger(__name__)


def tree_size(branch: Any) -> int:
    """Episodes one tree holds when every continuation reaches every branch point (1: none)."""
    return episodes_per_tree(branch_levels(branch))


def check_branch(config: Any) -> None:
    """Refuse a ``branch`` setting this config's trainer cannot train, naming the fix."""
    if config.branch is None:
        return
    branch_levels(config.branch)
    name = type(config).__name__
    if not type(config).branches:
        raise ValueError(
            f"branch={config.branch!r} is not supported by {name} yet: branched advantages are "
            f"wired into GRPO and RLOO (--algo grpo or rloo). REINFORCE++ normalises KL-penalised "
            f"returns over the batch rather than among siblings; the actor-critic trainers would "
            f"replace the critic's values at branched states (docs/maths.md, \"Monte-Carlo values "
            f'at branched states"), which they do not do yet. Drop branch or switch trainers.'
        )
    if config.max_staleness:
        raise ValueError(
            f"branch does not run with asynchronous rollouts (max_staleness="
            f"{config.max_staleness}); set max_staleness=0 or drop branch."
        )
    if getattr(config, "reward_source", "team") != "team":
        raise ValueError(
            f"branch values a node by the team's return, so it needs reward_source='team' (got "
            f"{config.reward_source!r}); set reward_source='team' or drop branch."
        )


def describe_branching(branch: Any, num_generations: int, episodes_per_iteration: int) -> str:
    """One line saying what a task costs with branching (logged before the run starts)."""
    levels = branch_levels(branch)
    shape = " then ".join(f"{lv.agent} {lv.width}×{lv.rollouts}" for lv in levels)
    per_task = num_generations * episodes_per_tree(levels)
    return (
        f"Branching at {shape}: up to {per_task} episodes per task ({num_generations} tree(s) of "
        f"{episodes_per_tree(levels)}), {episodes_per_iteration // per_task} task(s) per "
        f"iteration; fewer where an episode ends before a branch point."
    )


def without_copies(episodes: Sequence[Episode]) -> list[Episode]:
    """The episodes with their copies of a shared prefix left out (each decision once)."""
    if not any(d.branch_copy for e in episodes for d in e.decisions):
        return list(episodes)
    return [replace(e, decisions=[d for d in e.decisions if not d.branch_copy]) for e in episodes]


def _node(episode: Episode, d: Decision) -> BranchPath:
    if d.branch is None or episode.branch is None:
        raise ValueError(
            f"Decision of agent {d.agent!r} in episode seed {episode.seed} has no branch node; "
            f"branched advantages need episodes from the branching collector."
        )
    return (int(episode.group or 0), *d.branch)


def _leaves(episodes: Sequence[Episode]) -> dict[BranchPath, float | None]:
    return {(int(e.group or 0), *(e.branch or ())): e.team_return for e in episodes}


def batch_branch_advantages(
    episodes: Sequence[Episode],
    batch: RolloutBatch,
    *,
    scale_rewards: ScaleRewards,
    agents: Sequence[str],
) -> tuple[Tensor, dict[str, Any]]:
    """``(N,)`` advantage of each decision of ``batch`` and the ``branch/...`` metrics.

    Args:
        episodes: The update's episodes (``batch.episode`` indexes them); copies of a shared
            prefix may be in them or not, the batch holds each decision once.
        batch: The decisions trained.
        scale_rewards: ``"none"``, ``"group"`` or ``"batch"`` (TRL's names; the batch is this
            process's).
        agents: The team's agents, for the per-agent metrics' order.
    """
    leaves = _leaves(episodes)
    present = set(batch.agents)
    # The batch's rows are these decisions in this order (build_rollout_batch's).
    trained = [
        (e, d) for e in episodes for d in e.decisions if not d.branch_copy and d.agent in present
    ]
    if [d.agent for _, d in trained] != list(batch.agents):
        raise ValueError(
            "The batch does not hold the episodes' decisions once each in order; build it from "
            "without_copies(episodes)."
        )
    rows: list[tuple[BranchPath, Hashable]] = [(_node(e, d), d.agent) for e, d in trained]
    result = branch_advantages(leaves, rows, scale_rewards=scale_rewards)
    everything = [
        (_node(e, d), d.agent) for e in episodes for d in e.decisions if not d.branch_copy
    ]
    summary = branch_advantages(leaves, everything)
    metrics: dict[str, Any] = {
        "branch/alone_samples": int(summary.alone.sum()),
        "branch/dropped_samples": int(summary.dropped.sum()),
    }
    spread = branch_spread(leaves, everything)
    for agent in agents:
        if agent in spread:
            metrics[f"branch/{agent}/value_spread"] = spread[agent].value_spread
            metrics[f"branch/{agent}/flat_share"] = spread[agent].flat_share
    return result.advantages.to(torch.float32), metrics
