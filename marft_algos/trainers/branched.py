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
import math
from collections.abc import Hashable, Sequence
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor

from marft_algos.common.batch import RolloutBatch
from marft_algos.common.branching import (
    BranchPath,
    branch_advantages,
    branch_spread,
    monte_carlo_values,
    tree_values,
)
from marft_algos.common.critic_free_advantages import ScaleRewards
from marft_algos.rollout.branch_settings import branch_levels, episodes_per_tree
from marft_algos.rollout.collector import Decision, Episode, EpisodeRequest
from marft_algos.rollout.replay_branching import branching_around

__all__ = [
    "BranchCollecting",
    "BranchedActorCritic",
    "batch_branch_advantages",
    "check_branch",
    "describe_branching",
    "monte_carlo_decision_values",
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
            f"branch={config.branch!r} is not supported by {name} yet: REINFORCE++ normalises "
            f"KL-penalised returns over the batch, with no sibling baseline for the tree to feed. "
            f"Branching trains with GRPO, RLOO (beta=0), MARFT and PPO; drop branch or switch "
            f"trainers."
        )
    per_task = max(1, getattr(config, "num_generations", 1)) * tree_size(config.branch)
    if config.episodes_per_iteration % per_task:
        raise ValueError(
            f"episodes_per_iteration={config.episodes_per_iteration} must be a multiple of the "
            f"episodes of one task with branch, {per_task} (num_generations, if the trainer has "
            f"it, × width × rollouts of every level); e.g. set episodes_per_iteration={per_task}."
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
    return result.advantages.to(torch.float32), branch_metrics(episodes, agents)


def branch_metrics(episodes: Sequence[Episode], agents: Sequence[str]) -> dict[str, Any]:
    """The ``branch/...`` metrics of branched episodes: how many decisions had no sibling to
    compare with (``alone_samples``) or were dropped with their branch (``dropped_samples``), and
    per agent how far its alternatives' values spread and the share of its branch points where
    they did not differ at all (:func:`~marft_algos.common.branching.branch_spread`)."""
    leaves = _leaves(episodes)
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
    return metrics


def monte_carlo_decision_values(episodes: Sequence[Episode]) -> Tensor:
    """``(N,)`` the tree's Monte-Carlo value of each decision's observation, in episode order
    (copies included), NaN where the tree has none (docs/maths.md, "Monte-Carlo values at
    branched states").

    A branched decision (its node is an alternative, an even-length path below the tree) is worth
    ``V(s)``, its state's value (its parent node's: the mean over its alternatives); the decision
    right after it in the episode is worth ``V(s, u_w)``, its alternative's value (the mean over
    its continuations, which all start from that same copied state). The second wins where both
    apply (a branched decision right after another): it averages more episodes.
    """
    values = tree_values(_leaves(episodes))
    out: list[float] = []
    for e in episodes:
        after: float | None = None
        for d in e.decisions:
            node = _node(e, d)
            own = values.get(node[:-1], math.nan) if len(node) % 2 == 1 and len(node) > 2 else None
            out.append(after if after is not None else (own if own is not None else math.nan))
            after = values.get(node, math.nan) if own is not None else None
    return torch.tensor(out, dtype=torch.float32)


class BranchCollecting:
    """Trainer mixin: with ``branch`` set, the collector grows a branch tree per request (and the
    task's cost is logged), once the trainer is built."""

    config: Any
    collector: Any

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        c = self.config
        if c.branch is not None:
            make_env = getattr(self, "env_fn", None)  # agent programs replay in more copies
            self.collector = branching_around(self.collector, c.branch, make_env)
            generations = getattr(c, "num_generations", 1)
            logger.info(describe_branching(c.branch, generations, c.episodes_per_iteration))


class BranchedActorCritic(BranchCollecting):
    """What the actor-critic trainers do with ``branch``: a request is a tree, the critic's values
    at branched states are replaced by the tree's before GAE (VinePPO), and the copies of a shared
    prefix, which GAE reads along each episode, are then left out of the update."""

    def shards_per_iteration(self) -> int:
        c = self.config
        return int(c.episodes_per_iteration // tree_size(c.branch))

    def iteration_requests(self) -> list[EpisodeRequest]:
        requests = self.collector.requests(self.shards_per_iteration())  # one tree each
        return [requests[i] for i in self.dist.rollout_shard(len(requests))]  # type: ignore[attr-defined]

    def shard_unit(self, index: int, episode: Episode) -> Hashable:
        return index if episode.branch is None else episode.branch[0]

    def branch_values(self, episodes: Sequence[Episode], values: Tensor) -> Tensor:
        """``values`` (``(N,)``, or ``(N, T)`` whose first token holds a decision's value) with
        the tree's Monte-Carlo values at the branched states."""
        if self.config.branch is None:
            return values
        mc = monte_carlo_decision_values(episodes)  # (N,)
        if values.dim() == 1:
            return monte_carlo_values(values, mc)
        grid = torch.full_like(values, math.nan)  # (N, T)
        grid[:, 0] = mc
        return monte_carlo_values(values, grid)

    def branch_metrics(self, episodes: Sequence[Episode]) -> dict[str, Any]:
        """The ``branch/...`` metrics (:func:`branch_metrics`); none without ``branch``."""
        if self.config.branch is None:
            return {}
        return branch_metrics(episodes, self.agents)  # type: ignore[attr-defined]

    def trained_once(self, episodes: Sequence[Episode], *rows: Any) -> tuple[Any, ...]:
        """Each of ``rows`` (a batch, tensors or lists with one entry per decision of
        ``episodes``) without the copies of a shared prefix; unchanged without ``branch``."""
        if self.config.branch is None:
            return rows
        keep = [
            k for k, d in enumerate(d for e in episodes for d in e.decisions) if not d.branch_copy
        ]
        index = torch.tensor(keep, dtype=torch.long)
        return tuple(
            None if r is None else [r[k] for k in keep] if isinstance(r, list) else r[index]
            for r in rows
        )
