"""Advantage normalisation per agent (Dr. MAS) against hand-computed values and an independent
implementation written from the definition."""

from __future__ import annotations

import math

import pytest
import torch

from marft_algos.common.advantages import normalize_advantages
from marft_algos.common.agent_normalization import normalize_advantages_per_agent


def reference(advantages, agents, mask, eps=1e-8, unbiased=False):
    """(A − μ_k) / (σ_k + ε) per agent k over its valid entries, in plain Python lists."""
    rows = advantages.tolist()
    valid = mask.tolist()
    flat = not isinstance(rows[0], list)
    if flat:
        rows, valid = [[r] for r in rows], [[v] for v in valid]
    out = [[0.0] * len(r) for r in rows]
    for agent in set(agents):
        values = [
            x
            for r, v, a in zip(rows, valid, agents, strict=True)
            if a == agent
            for x, ok in zip(r, v, strict=True)
            if ok
        ]
        n = len(values)
        if n == 0:
            continue
        mean = sum(values) / n
        squares = sum((x - mean) ** 2 for x in values)
        if n == 1 or squares == 0:
            continue  # no ranking among the agent's entries: zeros
        std = math.sqrt(squares / (n - 1 if unbiased else n))
        for i, a in enumerate(agents):
            if a != agent:
                continue
            for t, ok in enumerate(valid[i]):
                if ok:
                    out[i][t] = (rows[i][t] - mean) / (std + eps)
    return torch.tensor([o[0] for o in out] if flat else out)


def test_hand_computed_two_agents():
    # router: 1, 3 → mean 2, population std 1 → -1, 1.
    # actor: 0, 0, 6 → mean 2, std sqrt((4 + 4 + 16) / 3) = sqrt(8) → -2/√8, -2/√8, 4/√8.
    advantages = torch.tensor([1.0, 0.0, 3.0, 0.0, 6.0])
    agents = ["router", "actor", "router", "actor", "actor"]
    out = normalize_advantages_per_agent(advantages, agents, eps=0.0)
    root8 = math.sqrt(8)
    expected = torch.tensor([-1.0, -2 / root8, 1.0, -2 / root8, 4 / root8])
    torch.testing.assert_close(out, expected)
    # Over the whole batch instead the router's entries would be scaled by the actor's spread.
    assert not torch.allclose(normalize_advantages(advantages, eps=0.0), expected)


def test_hand_computed_sample_std_and_eps():
    # writer: 2, 4 → mean 3, sample std sqrt(2): ∓1/(√2 + 0.5).
    out = normalize_advantages_per_agent(
        torch.tensor([2.0, 4.0]), ["writer", "writer"], eps=0.5, unbiased=True
    )
    value = 1 / (math.sqrt(2) + 0.5)
    torch.testing.assert_close(out, torch.tensor([-value, value]))


def test_token_level_with_a_mask_and_a_constant_agent():
    # (N, T): padding never enters the statistics and comes back 0; an agent whose entries are
    # all equal carries no ranking and gets zeros.
    advantages = torch.tensor([[1.0, 2.0, 99.0], [3.0, 99.0, 99.0], [5.0, 5.0, 99.0]])
    mask = torch.tensor([[True, True, False], [True, False, False], [True, True, False]])
    agents = ["a", "a", "b"]
    out = normalize_advantages_per_agent(advantages, agents, mask, eps=0.0)
    expected = torch.tensor(
        [[-math.sqrt(1.5), 0.0, 0.0], [math.sqrt(1.5), 0.0, 0.0], [0.0, 0.0, 0.0]]
    )  # a: 1, 2, 3 → mean 2, std sqrt(2/3)
    torch.testing.assert_close(out, expected)


@pytest.mark.parametrize("unbiased", [False, True])
@pytest.mark.parametrize("shape", [(12,), (12, 5)])
def test_matches_the_reference_on_random_batches(shape, unbiased):
    generator = torch.Generator().manual_seed(7)
    for _ in range(20):
        advantages = torch.randn(shape, generator=generator) * 3
        mask = torch.rand(shape, generator=generator) > 0.3
        agents = [["router", "coder", "reviewer"][int(k)] for k in torch.randint(0, 3, (12,))]
        out = normalize_advantages_per_agent(advantages, agents, mask, unbiased=unbiased)
        torch.testing.assert_close(out, reference(advantages, agents, mask, unbiased=unbiased))


def test_each_agent_has_mean_zero_and_std_one():
    advantages = torch.tensor([10.0, 0.1, 20.0, 0.3, 30.0, 0.2])
    agents = ["big", "small"] * 3
    out = normalize_advantages_per_agent(advantages, agents, eps=0.0)
    for agent in ("big", "small"):
        rows = torch.tensor([a == agent for a in agents])
        assert abs(float(out[rows].mean())) < 1e-6
        assert abs(float(out[rows].std(unbiased=False)) - 1) < 1e-5


def test_order_leaves_unnamed_agents_at_zero_and_a_custom_normalizer_is_used():
    advantages = torch.tensor([1.0, 2.0, 5.0])
    agents = ["a", "a", "b"]
    out = normalize_advantages_per_agent(advantages, agents, order=["a"])
    assert out[2] == 0.0 and out[0] < 0 < out[1]
    seen = []

    def record(adv, valid):
        seen.append(adv.tolist())
        return adv * 2

    doubled = normalize_advantages_per_agent(advantages, agents, normalize=record)
    assert seen == [[1.0, 2.0], [5.0]]
    torch.testing.assert_close(doubled, advantages * 2)


def test_one_agent_per_row_is_required():
    with pytest.raises(ValueError, match="one agent per row"):
        normalize_advantages_per_agent(torch.zeros(3), ["a", "b"])
