"""A credit rule that lets no reward reach an agent's decisions is named in one warning on the run's
first episodes (e.g. an ungraded agent acting after the graded one under "graded"); a team whose
unpaid agents act before a paid one (the paper's reasoner → actor) gets none."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
from test_trainers import SMALL
from trainer_envs import DigitsEnv

from marft_algos.policy import MultiAgentPolicy
from marft_algos.policy.critic import Critic
from marft_algos.rollout.evaluation import unpaid_agents_reason
from marft_algos.trainers.action_marft import ActionMARFTConfig, ActionMARFTTrainer
from marft_algos.trainers.grpo import GRPOConfig, GRPOTrainer
from marft_envs.core import Chain


def episode(*rounds):
    """An episode from rounds of agent names (the last of each round ends it)."""
    decisions = []
    for names in rounds:
        for i, name in enumerate(names):
            decisions.append(SimpleNamespace(agent=name, round_end=i == len(names) - 1))
    return SimpleNamespace(decisions=decisions)


GRADED = {"planner": False, "writer": True, "checker": False}


def test_a_checker_after_the_graded_writer_is_named_with_its_unreached_decisions():
    # Round 1 sends the work back (the writer acts again after the checker), round 2 approves.
    episodes = [episode(["planner", "writer", "checker"], ["writer", "checker"])]
    why = unpaid_agents_reason(episodes, "graded", GRADED, own_return=False)
    assert why is not None and "'checker' (1 of 2 decisions)" in why and "planner" not in why
    assert "credit='team'" in why
    # Each agent on its own return: every decision of an unpaid agent is unreached.
    why = unpaid_agents_reason(episodes, "graded", GRADED, own_return=True)
    assert "'planner' (1 of 1 decisions)" in why and "'checker' (2 of 2 decisions)" in why
    # "team" pays every agent that acted; "last" pays the checker, the writer learns through it.
    assert unpaid_agents_reason(episodes, "team", GRADED, own_return=False) is None
    assert unpaid_agents_reason(episodes, "last", GRADED, own_return=False) is None
    assert (
        unpaid_agents_reason([episode(["planner", "writer"])], "graded", GRADED, own_return=False)
        is None
    )


def trainer(tiny_path, kind, dependency):
    policy = MultiAgentPolicy.from_pretrained(tiny_path, ["writer", "answerer"], seed=0)
    env_fn = lambda: DigitsEnv(dependency=dependency)  # noqa: E731
    if kind == "grpo":
        settings = {k: v for k, v in SMALL.items() if k != "critic_learning_rate"}
        config = GRPOConfig(**{**settings, "iterations": 1, "num_generations": 2})
        return GRPOTrainer(policy, env_fn, config)
    config = ActionMARFTConfig(**{**SMALL, "iterations": 1})
    return ActionMARFTTrainer(policy, env_fn, config, critic=Critic(policy, seed=0))


@pytest.mark.parametrize(
    ("kind", "order", "warned"),
    [
        ("action", ("answerer", "writer"), True),  # the ungraded writer acts after the graded one
        ("action", ("writer", "answerer"), False),  # the paper's order: the return reaches it
        ("grpo", ("answerer", "writer"), False),  # GRPO trains on the team return by default
    ],
)
def test_the_trainer_warns_once_at_its_first_iteration(tiny_path, caplog, kind, order, warned):
    run = trainer(tiny_path, kind, Chain(order=order))
    with caplog.at_level(logging.WARNING):
        run.train()
    found = [r.getMessage() for r in caplog.records if "No reward can reach" in r.getMessage()]
    assert len(found) == int(warned)
    if warned:
        assert "'writer' (4 of 4 decisions)" in found[0] and "graded agents only" in found[0]
