"""Advantages from a branched team episode: Monte-Carlo values of a tree of continuations and a
leave-one-out baseline over siblings (docs/maths.md, "Branched advantages").

Pure functions on plain lists and tensors: no environment, model or trainer imports.

The branch tree
---------------
Every node is a path, a tuple of ints read from the root. The kinds of node alternate: a *state*
node (where an agent is about to choose) has *alternatives* as children (the ``width`` actions the
branched agent sampled there), and an alternative has *continuations* as children (the
``rollouts`` independent runs of the rest of the team after it). A continuation that reaches the
next branched agent is itself a state node again; one that ends first is a leaf. The caller picks
the paths, e.g. ``(task, tree, alternative, continuation, ...)``; these functions only read
parent/child structure, so a path is a node and ``path[:-1]`` its parent.

* A **leaf** is a finished episode with its team return, or ``None`` if it was dropped (the
  episode failed and must not be trained on).
* A node's **value** is the mean of its children's values (children without a value left out):
  ``V(s, u_w)`` of an alternative is the mean of its continuations', ``V(s)`` of a state the mean of
  its alternatives'. A node without any valued leaf below it has no value (dropped).
* A **sample** is ``(node, agent)``: an agent's decisions taken in that node (the branched
  decision is taken in its alternative node; the others in the continuation they belong to).
  Its group is ``(parent, agent)``: the same agent, the same state prefix, the same upstream
  choice. Its advantage is its value minus the mean of its siblings' values (leave one out), so a
  team reward is never compared across different upstream choices.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from marft_algos.common.critic_free_advantages import ScaleRewards

__all__ = [
    "BranchAdvantages",
    "BranchPath",
    "BranchSpread",
    "branch_advantages",
    "branch_spread",
    "monte_carlo_values",
    "tree_values",
]

BranchPath = tuple[int, ...]
"""A node of the branch tree: the choices (ints) that lead to it from the root."""


def tree_values(leaves: Mapping[BranchPath, float | None]) -> dict[BranchPath, float]:
    """Monte-Carlo value of every node with a valued leaf below it.

    A leaf's value is its team return; an inner node's is the mean of its children's values
    (each child counts once, however many leaves it has: a nested level averages its own
    alternatives first, as C3's subtree values do). Children without a value (every leaf below
    them dropped) are left out of the mean; a node with none left has no value and is absent.

    Args:
        leaves: Team return of each finished episode by its path; None marks a dropped episode.

    Returns:
        ``{node: value}`` over the leaves and every prefix of a leaf's path (the root ``()``
        included when anything survived).

    Raises:
        ValueError: A leaf's path is a prefix of another leaf's (a node cannot both end and go on).
    """
    children: dict[BranchPath, set[BranchPath]] = defaultdict(set)
    for path in leaves:
        for depth in range(len(path)):
            children[path[:depth]].add(path[: depth + 1])
    both = sorted(p for p in leaves if p in children)
    if both:
        raise ValueError(
            f"Leaf {both[0]} is also an inner node of another leaf's path; every finished episode "
            f"must end its own branch of the tree (give early-ending episodes their own path)."
        )
    values: dict[BranchPath, float] = {
        path: float(r) for path, r in leaves.items() if r is not None
    }
    for node in sorted(children, key=len, reverse=True):  # deepest first: children are done
        known = [values[c] for c in sorted(children[node]) if c in values]
        if known:
            values[node] = sum(known) / len(known)
    return values


@dataclass(frozen=True)
class BranchAdvantages:
    """What :func:`branch_advantages` computed for each sample ``(S,)``.

    Attributes:
        advantages: ``(S,)`` value minus the leave-one-out mean of the siblings' values, scaled
            as ``scale_rewards`` says; 0 where the sample is dropped or alone.
        values: ``(S,)`` the sample's node value ``V``; NaN where dropped.
        baselines: ``(S,)`` the mean of its siblings' values; NaN where dropped or alone.
        dropped: ``(S,)`` bool, the node has no valued leaf below it (never trained on).
        alone: ``(S,)`` bool, valued but without a valued sibling (advantage 0: no comparison).
    """

    advantages: Tensor
    values: Tensor
    baselines: Tensor
    dropped: Tensor
    alone: Tensor


def _group_of(node: BranchPath, agent: Hashable) -> tuple[BranchPath, Hashable]:
    if not node:
        raise ValueError(
            "A sample's node is the root (): it has no parent, so no siblings to compare with; "
            "give every sample a node below the root, e.g. (task, tree, ...)."
        )
    return node[:-1], agent


def branch_advantages(
    leaves: Mapping[BranchPath, float | None],
    samples: Sequence[tuple[BranchPath, Hashable]],
    *,
    scale_rewards: ScaleRewards = "none",
    eps: float = 1e-4,
) -> BranchAdvantages:
    """Leave-one-out advantages of branched samples (C3's sibling baseline on VinePPO-style values).

    ``A = (V(node) − mean of V over the other valued samples of its group) / (σ + eps)`` with the
    group ``(parent node, agent)`` and σ chosen by ``scale_rewards`` (TRL's names):

    * ``"none"``: no division (σ + eps replaced by 1);
    * ``"group"``: the unbiased std of the group's values (the sample's own included);
    * ``"batch"``: the unbiased std of every valued sample's value in the call.

    A group whose values are all equal gets advantage 0 exactly. Samples naming the same
    ``(node, agent)`` twice are one sample (they share its numbers).

    Args:
        leaves: Team return of each finished episode by its path (None: dropped).
        samples: ``(node, agent)`` of each sample; ``node`` is a prefix of some leaf's path.
        scale_rewards: ``"none"``, ``"group"`` or ``"batch"``.
        eps: Added to σ before dividing.

    Returns:
        The advantages, values, baselines and the dropped/alone flags, each ``(S,)``.
    """
    if scale_rewards not in ("group", "batch", "none"):
        raise ValueError(
            f"scale_rewards must be 'group', 'batch' or 'none', got {scale_rewards!r}."
        )
    values = tree_values(leaves)
    unique = list(dict.fromkeys(samples))
    members: dict[tuple[BranchPath, Hashable], list[float]] = defaultdict(list)
    for node, agent in unique:
        if node in values:
            members[_group_of(node, agent)].append(values[node])
    valued = [values[node] for node, _ in unique if node in values]
    batch_std = _std(valued)
    out: dict[tuple[BranchPath, Hashable], tuple[float, float, bool, bool]] = {}
    for node, agent in unique:
        if node not in values:
            out[(node, agent)] = (0.0, math.nan, True, False)
            continue
        group = members[_group_of(node, agent)]
        if len(group) < 2:
            out[(node, agent)] = (0.0, math.nan, False, True)
            continue
        v = values[node]
        baseline = (sum(group) - v) / (len(group) - 1)
        divisor = {"group": _std(group) + eps, "batch": batch_std + eps}.get(scale_rewards, 1.0)
        flat = max(group) == min(group)  # exactly 0, not round-off over a tiny std
        out[(node, agent)] = (0.0 if flat else (v - baseline) / divisor, baseline, False, False)
    rows = [out[key] for key in samples]
    return BranchAdvantages(
        advantages=torch.tensor([r[0] for r in rows], dtype=torch.float32),
        values=torch.tensor(
            [values.get(node, math.nan) for node, _ in samples], dtype=torch.float32
        ),
        baselines=torch.tensor([r[1] for r in rows], dtype=torch.float32),
        dropped=torch.tensor([r[2] for r in rows], dtype=torch.bool),
        alone=torch.tensor([r[3] for r in rows], dtype=torch.bool),
    )


def _std(xs: Sequence[float]) -> float:
    """Unbiased (n − 1) std, as ``torch.std``; 0 for fewer than two values."""
    if len(xs) < 2:
        return 0.0
    mean = sum(xs) / len(xs)
    return math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1))


@dataclass(frozen=True)
class BranchSpread:
    """How much one agent's sibling values differ (per agent, over its branch groups).

    Attributes:
        value_spread: Mean over the agent's groups of max − min of the siblings' values: for a
            branched agent, how much its choice changed the team's return from the same state.
        flat_share: Share of those groups whose values are all equal (no learning signal).
        groups: Groups with at least two valued siblings (the ones measured).
    """

    value_spread: float
    flat_share: float
    groups: int


def branch_spread(
    leaves: Mapping[BranchPath, float | None],
    samples: Sequence[tuple[BranchPath, Hashable]],
) -> dict[Hashable, BranchSpread]:
    """Per agent, the spread of its branch groups' values and the share of flat groups.

    Only groups with two or more valued siblings count (a lone or dropped sample compares with
    nothing). An agent without such a group is absent.

    Args:
        leaves: Team return of each finished episode by its path (None: dropped).
        samples: ``(node, agent)`` of each sample, as :func:`branch_advantages` takes them.
    """
    values = tree_values(leaves)
    groups: dict[tuple[BranchPath, Hashable], list[float]] = defaultdict(list)
    for node, agent in dict.fromkeys(samples):
        if node in values:
            groups[_group_of(node, agent)].append(values[node])
    spreads: dict[Hashable, list[float]] = defaultdict(list)
    for (_, agent), vs in groups.items():
        if len(vs) >= 2:
            spreads[agent].append(max(vs) - min(vs))
    return {
        agent: BranchSpread(
            value_spread=sum(s) / len(s),
            flat_share=sum(1 for x in s if x == 0.0) / len(s),
            groups=len(s),
        )
        for agent, s in spreads.items()
    }


def monte_carlo_values(values: Tensor, mc_values: Tensor) -> Tensor:
    """The critic's values with the Monte-Carlo values put in where the tree has one (VinePPO).

    Action- and token-level MARFT run GAE over critic values ``V_φ``. At a branched state the
    tree holds an unbiased estimate instead, the mean return of the rollouts from it: at the
    branched decision's observation ``V̂(s)`` (the mean over its alternatives), and at the first
    decision after alternative ``u_w`` ``V̂(s, u_w)`` (the mean over its continuations; the copied
    env makes that next state the same for each). Those entries replace the critic's before GAE
    (docs/maths.md, "Monte-Carlo values at branched states"); everything else keeps ``V_φ``.

    Args:
        values: Critic values, any shape (``(B, T)`` decisions, or per token).
        mc_values: Same shape: the tree's value where there is one, NaN elsewhere.

    Returns:
        ``values`` with every finite entry of ``mc_values`` in its place.
    """
    if mc_values.shape != values.shape:
        raise ValueError(
            f"mc_values has shape {tuple(mc_values.shape)} but values has {tuple(values.shape)}; "
            f"give one entry per value (NaN where the tree has no estimate)."
        )
    return torch.where(torch.isfinite(mc_values), mc_values.to(values.dtype), values)
