"""Branched advantages: hand-computed cases, and an independent implementation of the C3 /
VinePPO definitions over an explicit nested tree."""

from __future__ import annotations

import math
import random
import statistics
from typing import Any

import pytest
import torch

from marft_algos.common.branching import (
    branch_advantages,
    branch_spread,
    monte_carlo_values,
    tree_values,
)

EPS = 1e-4


def _single_level() -> dict[tuple[int, ...], float | None]:
    # Task 0, tree 0: the router branches 3 ways, 2 continuations each.
    return {
        (0, 0, 0, 0): 1.0,
        (0, 0, 0, 1): 0.0,  # alternative 0: V = 0.5
        (0, 0, 1, 0): 1.0,
        (0, 0, 1, 1): 1.0,  # alternative 1: V = 1
        (0, 0, 2, 0): 0.0,
        (0, 0, 2, 1): 0.0,  # alternative 2: V = 0
    }


def test_values_are_means_of_children():
    values = tree_values(_single_level())
    assert values[(0, 0, 0)] == 0.5 and values[(0, 0, 1)] == 1.0 and values[(0, 0, 2)] == 0.0
    assert values[(0, 0)] == pytest.approx(0.5)  # V(s): mean over the three alternatives
    assert values[()] == pytest.approx(0.5)


def test_branched_decision_against_leave_one_out_by_hand():
    samples = [((0, 0, w), "router") for w in range(3)]
    out = branch_advantages(_single_level(), samples)
    # 0.5 − (1 + 0)/2 = 0; 1 − (0.5 + 0)/2 = 0.75; 0 − (0.5 + 1)/2 = −0.75
    assert out.advantages.tolist() == pytest.approx([0.0, 0.75, -0.75])
    assert out.baselines.tolist() == pytest.approx([0.5, 0.25, 0.75])
    scaled = branch_advantages(_single_level(), samples, scale_rewards="group")
    std = statistics.stdev([0.5, 1.0, 0.0])  # 0.5, unbiased as torch.std
    assert scaled.advantages.tolist() == pytest.approx(
        [0.0, 0.75 / (std + EPS), -0.75 / (std + EPS)]
    )


def test_downstream_agents_compare_only_with_the_same_alternative():
    samples = [((0, 0, w, m), "solver") for w in range(3) for m in range(2)]
    out = branch_advantages(_single_level(), samples)
    # Alternative 0: returns 1, 0 → ±1; alternatives 1 and 2 are flat → 0 (never mixed across w).
    assert out.advantages.tolist() == pytest.approx([1.0, -1.0, 0.0, 0.0, 0.0, 0.0])
    batch = branch_advantages(_single_level(), samples, scale_rewards="batch")
    std = statistics.stdev([1.0, 0.0, 1.0, 1.0, 0.0, 0.0])
    assert batch.advantages.tolist() == pytest.approx(
        [1 / (std + EPS), -1 / (std + EPS), 0, 0, 0, 0]
    )


def test_nested_levels_average_their_own_alternatives_first():
    # Router: 2 alternatives × 1 continuation; reviewer below: 2 alternatives × 2 continuations,
    # except that under router alternative 1 the reviewer's alternative 1 lost a continuation.
    leaves = {
        (0, 0, 0, 0, 0, 0): 1.0,
        (0, 0, 0, 0, 0, 1): 1.0,  # reviewer alt 0: 1
        (0, 0, 0, 0, 1, 0): 0.0,
        (0, 0, 0, 0, 1, 1): 1.0,  # reviewer alt 1: 0.5 → router alt 0: 0.75
        (0, 0, 1, 0, 0, 0): 0.0,
        (0, 0, 1, 0, 0, 1): 0.0,  # reviewer alt 0: 0
        (0, 0, 1, 0, 1, 0): 1.0,  # reviewer alt 1: 1 (one continuation) → router alt 1: 0.5
    }
    values = tree_values(leaves)
    assert values[(0, 0, 0)] == 0.75 and values[(0, 0, 1)] == 0.5
    # A plain leaf mean would give 3/4 and 1/3 for router alt 1; the subtree mean keeps 1/2.
    router = branch_advantages(leaves, [((0, 0, 0), "router"), ((0, 0, 1), "router")])
    assert router.advantages.tolist() == pytest.approx([0.25, -0.25])
    reviewer = branch_advantages(
        leaves, [((0, 0, r, 0, w), "reviewer") for r in range(2) for w in range(2)]
    )
    assert reviewer.advantages.tolist() == pytest.approx([0.5, -0.5, -1.0, 1.0])


def test_dropped_branches_leave_the_baseline_and_a_lone_sibling_gets_zero():
    leaves = dict(_single_level())
    leaves[(0, 0, 1, 0)] = leaves[(0, 0, 1, 1)] = None  # alternative 1 failed entirely
    out = branch_advantages(leaves, [((0, 0, w), "router") for w in range(3)])
    # 0.5 − 0 and 0 − 0.5: alternative 1 is neither trained nor in the others' baseline.
    assert out.advantages.tolist() == pytest.approx([0.5, 0.0, -0.5])
    assert out.dropped.tolist() == [False, True, False]
    assert math.isnan(out.values[1])
    leaves[(0, 0, 2, 0)] = leaves[(0, 0, 2, 1)] = None
    lone = branch_advantages(leaves, [((0, 0, w), "router") for w in range(3)])
    assert lone.advantages.tolist() == [0.0, 0.0, 0.0]
    assert lone.alone.tolist() == [True, False, False] and lone.dropped.tolist() == [
        False,
        True,
        True,
    ]


def test_an_episode_ending_before_the_branch_point_is_a_leaf_of_its_own():
    # Two trees of one task; in tree 1 the episode ended before the router acted.
    leaves = {
        (0, 0, 0, 0): 1.0,
        (0, 0, 0, 1): 0.0,
        (0, 0, 1, 0): 0.0,
        (0, 0, 1, 1): 0.0,
        (0, 1): 1.0,
    }
    values = tree_values(leaves)
    assert values[(0, 0)] == 0.25 and values[(0, 1)] == 1.0
    # The agent that acts before the branch point compares its trees' values.
    planner = branch_advantages(leaves, [((0, 0), "planner"), ((0, 1), "planner")])
    assert planner.advantages.tolist() == pytest.approx([-0.75, 0.75])
    with pytest.raises(ValueError, match="inner node"):
        tree_values({(0, 1): 1.0, (0, 1, 0): 1.0})


def test_spread_per_agent():
    samples = [((0, 0, w), "router") for w in range(3)]
    samples += [((0, 0, w, m), "solver") for w in range(3) for m in range(2)]
    spread = branch_spread(_single_level(), samples)
    assert spread["router"].value_spread == 1.0 and spread["router"].flat_share == 0.0
    assert spread["solver"].value_spread == pytest.approx(1 / 3)
    assert spread["solver"].flat_share == pytest.approx(2 / 3) and spread["solver"].groups == 3


def test_monte_carlo_values_replace_the_critic_where_the_tree_has_one():
    values = torch.tensor([[0.1, 0.2, 0.3]])
    mc = torch.tensor([[float("nan"), 0.75, float("nan")]])
    assert monte_carlo_values(values, mc)[0].tolist() == pytest.approx([0.1, 0.75, 0.3])
    with pytest.raises(ValueError, match="one entry per value"):
        monte_carlo_values(values, mc[:, :2])


def test_bad_scale_and_root_samples_are_refused():
    with pytest.raises(ValueError, match="scale_rewards"):
        branch_advantages(_single_level(), [((0, 0, 0), "router")], scale_rewards="std")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="root"):
        branch_advantages(_single_level(), [((), "router")])


# --------------------------------------------------------------------- independent implementation
# The tree written out as nested dicts, as C3 builds it: a node is {"children": {i: node}} or a
# leaf {"return": r} (None: dropped). Values are recursive subtree means (VinePPO's Monte-Carlo
# value of a state is the mean return of the rollouts from it); advantages compare a node with
# its siblings under the same parent, for the same agent, leaving itself out.


def _random_tree(
    rng: random.Random, levels: list[tuple[int, int]], depth: int = 0
) -> dict[str, Any]:
    """A state node: ``width`` alternatives × ``rollouts`` continuations per level; a continuation
    may end early (a leaf before the next level) and any leaf may be dropped."""
    width, rollouts = levels[depth]
    alternatives = {}
    for w in range(width):
        continuations = {}
        for m in range(rollouts):
            if depth + 1 < len(levels) and rng.random() < 0.75:
                continuations[m] = _random_tree(rng, levels, depth + 1)
            else:
                dropped = rng.random() < 0.15
                continuations[m] = {
                    "return": None if dropped else float(rng.choice([0, 0.5, 1, 2]))
                }
        alternatives[w] = {"children": continuations}
    return {"children": alternatives}


def _value(node: dict[str, Any]) -> float | None:
    if "return" in node:
        return node["return"]
    child_values = [_value(c) for c in node["children"].values()]
    kept = [v for v in child_values if v is not None]
    return sum(kept) / len(kept) if kept else None


def _walk(
    node: dict[str, Any], path: tuple[int, ...], out: dict[tuple[int, ...], dict[str, Any]]
) -> None:
    out[path] = node
    for i, child in node.get("children", {}).items():
        _walk(child, (*path, i), out)


def _reference(
    root: dict[str, Any], samples: list[tuple[tuple[int, ...], str]], scale: str
) -> list[float]:
    nodes: dict[tuple[int, ...], dict[str, Any]] = {}
    _walk(root, (), nodes)
    all_values = [_value(nodes[n]) for n, _ in dict.fromkeys(samples)]
    batch_values = [v for v in all_values if v is not None]
    batch_std = statistics.stdev(batch_values) if len(batch_values) > 1 else 0.0
    out = []
    for node, agent in samples:
        mine = _value(nodes[node])
        siblings = []
        for other, other_agent in dict.fromkeys(samples):
            if other_agent == agent and other[:-1] == node[:-1] and other != node:
                v = _value(nodes[other])
                if v is not None:
                    siblings.append(v)
        if mine is None or not siblings:
            out.append(0.0)
            continue
        group = [mine, *siblings]
        if max(group) == min(group):
            out.append(0.0)
            continue
        advantage = mine - sum(siblings) / len(siblings)
        if scale == "group":
            advantage /= statistics.stdev(group) + EPS
        elif scale == "batch":
            advantage /= batch_std + EPS
        out.append(advantage)
    return out


@pytest.mark.parametrize("scale", ["none", "group", "batch"])
@pytest.mark.parametrize("levels", [[(3, 4)], [(2, 2), (3, 2)], [(2, 1), (2, 3), (2, 2)]])
@pytest.mark.parametrize("seed", range(4))
def test_against_the_nested_tree_definition(scale, levels, seed):
    rng = random.Random(seed)
    root = {"children": {0: _random_tree(rng, levels)}}  # one task, one tree
    nodes: dict[tuple[int, ...], dict[str, Any]] = {}
    _walk(root, (), nodes)
    leaves = {path: n["return"] for path, n in nodes.items() if "return" in n}
    # Branched agents act in alternative nodes (odd depth below the tree), the others in
    # continuations (even depth); an agent acts in only some continuations (uneven episodes).
    samples = []
    for path in nodes:
        if len(path) >= 2 and len(path) % 2 == 0:
            samples.append((path, f"brancher{len(path) // 2}"))
        elif len(path) >= 3:
            samples.append((path, "worker"))
            if rng.random() < 0.5:
                samples.append((path, "helper"))
    out = branch_advantages(leaves, samples, scale_rewards=scale)  # type: ignore[arg-type]
    assert out.advantages.tolist() == pytest.approx(_reference(root, samples, scale), abs=1e-5)
    for (node, _), value in zip(samples, out.values.tolist(), strict=True):
        expected = _value(nodes[node])
        assert math.isnan(value) if expected is None else value == pytest.approx(expected)
