"""The actor-critic trainers' shared strategies (marft_algos.trainers.levels): advantage normalisation
gives the same answer as ``normalize_advantages`` for every batch size, one process or several;
a reward paid to an agent in a later round reaches its latest decision undiscounted (the choice
documented in docs/maths.md)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from marft_algos.common.advantages import normalize_advantages
from marft_algos.distributed import DistributedContext
from marft_algos.rollout.collector import Decision, Episode
from marft_algos.trainers.levels import ActionLevel, TokenLevel, normalize, normalize_by_agent


@dataclass(frozen=True)
class _OtherRanksEmpty(DistributedContext):
    """Two processes where the others hold no entries: collectives return this rank's values."""

    world_size: int = 2

    def sum(self, values):
        return [float(v) for v in values]

    def max(self, values):
        return [float(v) for v in values]


@pytest.mark.parametrize("distributed", [None, _OtherRanksEmpty()])
@pytest.mark.parametrize(
    ("advantages", "mask"),
    [
        (torch.tensor([2.5]), torch.tensor([True])),  # action level, one decision
        (torch.tensor([[2.5, 9.0]]), torch.tensor([[True, False]])),  # token level, one token
        (torch.tensor([[-1.0, 7.0], [3.0, 0.0]]), torch.tensor([[False, False], [True, False]])),
    ],
)
def test_a_set_of_one_normalises_to_zero_like_normalize_advantages(advantages, mask, distributed):
    assert torch.equal(normalize_advantages(advantages, mask), torch.zeros_like(advantages))
    assert torch.equal(normalize(advantages, mask, distributed), torch.zeros_like(advantages))


@pytest.mark.parametrize("distributed", [None, _OtherRanksEmpty()])
def test_an_agent_with_one_decision_trains_on_a_zero_advantage_per_agent(distributed):
    advantages = torch.tensor([4.0, 1.0, 2.0, 3.0])
    agents = ["writer", "answerer", "answerer", "answerer"]
    out = normalize_by_agent(advantages, torch.ones(4, dtype=torch.bool), agents, distributed)
    assert out[0] == 0.0
    torch.testing.assert_close(out[1:], normalize_advantages(advantages[1:]))


def test_nothing_valid_gives_zeros():
    adv = torch.tensor([[1.0, 2.0]])
    none = torch.zeros(1, 2, dtype=torch.bool)
    assert torch.equal(normalize(adv, none), torch.zeros(1, 2))
    assert torch.equal(normalize(adv, none, _OtherRanksEmpty()), torch.zeros(1, 2))


# ---------------------------------------------------------------------- late rewards (a choice)
@dataclass
class _Settings:
    gamma: float = 0.9
    gae_lambda: float = 0.8
    gamma_token: float = 1.0
    lam_token: float = 1.0
    intra_round_discount: bool = True


def _late_reward_episode() -> Episode:
    """Round 0: writer, answerer. Round 1: the answerer alone, but the writer is paid 1.25 too."""

    def decision(t, turn, agent, reward, round_end, done=False):
        return Decision(
            0, t, turn, agent, [1], [5, 6], [-1.0, -1.0], "x", True, reward, round_end, done
        )

    return Episode(
        seed=0,
        options={},
        decisions=[
            decision(0, 0, "writer", 0.25 + 1.25, False),  # as the collector credits it
            decision(0, 1, "answerer", 1.0, True),
            decision(1, 0, "answerer", 1.0, True, done=True),
        ],
    )


def test_a_late_reward_lands_on_the_agents_latest_decision_undiscounted():
    values = torch.tensor([0.5, 0.2, 0.1])
    s = _Settings()
    adv, _ = ActionLevel().targets([_late_reward_episode()], values, s)
    g, gl = s.gamma, s.gamma * s.gae_lambda
    d2 = 1.0 - 0.1  # last decision, episode over
    d1 = 1.0 + g * 0.1 - 0.2
    d0 = 1.5 + g * 0.2 - 0.5  # 0.25 + 1.25, not 0.25 + gamma**2 * 1.25
    expected = torch.tensor([d0 + gl * (d1 + gl * d2), d1 + gl * d2, d2])
    torch.testing.assert_close(adv, expected)
    # Token level: the same reward on the writer's last token, every token sharing its return.
    token_values = torch.zeros(3, 2)
    _, returns = TokenLevel().targets([_late_reward_episode()], token_values, s)
    expected_return = 1.5 + gl * (1.0 + gl * 1.0)  # V = 0: the GAE return over the decisions
    torch.testing.assert_close(returns[0], torch.full((2,), expected_return))
