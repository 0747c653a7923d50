"""Agent programs with ``branch`` on the built-in tiny model: a replayed episode has exactly the
token ids and log-probs of an unbranched episode that made the same choices, and GRPO and MARFT
train on program trees (the advantages GRPO trains on are the branched advantages of the
recorded returns)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
import torch
from test_trainers import SMALL, adapter_params, changed

from marft_algos import (
    ActionMARFTConfig,
    ActionMARFTTrainer,
    Critic,
    GRPOConfig,
    GRPOTrainer,
    MultiAgentPolicy,
)
from marft_algos.common.branching import branch_advantages
from marft_algos.rollout.collector import EpisodeRequest, GenerationSettings, RolloutCollector
from marft_algos.rollout.replay_branching import ReplayBranchingCollector, branching_around
from marft_envs.programs import ProgramEnv

AGENTS = ["planner", "router", "solver"]
BRANCH = {"router": {"width": 2, "rollouts": 2}}
TASKS = [f"{a} + {b}" for a in range(10) for b in range(10)]


def routed(task, client):
    """planner -> router -> solver, with seeded randomness in the router's question."""
    plan = client.chat.completions.create(
        model="planner", messages=[{"role": "user", "content": f"Plan: {task}"}]
    )
    pick = int(client.rng.integers(3))
    route = client.chat.completions.create(
        model="router",
        messages=[
            {"role": "system", "content": "Pick a route."},
            {"role": "user", "content": f"{task} ({pick}) {plan.choices[0].message.content}"},
        ],
    )
    answer = client.chat.completions.create(
        model="solver",
        messages=[{"role": "user", "content": f"{task} via {route.choices[0].message.content}"}],
    )
    text = answer.choices[0].message.content or ""
    return {"success": float(len(text) % 2 == 0)}


def _env():
    return ProgramEnv(routed, AGENTS, TASKS)


@dataclass
class _Generation:
    prompt_ids: list[int]
    action_ids: list[int]
    log_probs: list[float]
    text: str
    finished: bool


class ChosenPolicy:
    """Makes the given choices: each call renders its observation with the real policy and
    scores the chosen action's ids (never re-tokenised) with a forward pass."""

    def __init__(self, policy, choices):
        self.policy, self.choices, self.agents = policy, list(choices), policy.agents

    def generate(self, agent, messages_batch, settings, *, generator):
        out = []
        for messages in messages_batch:
            d = self.choices.pop(0)
            assert d.agent == agent
            prompt = self.policy.render(agent, messages)
            with torch.no_grad():
                scored = self.policy.token_log_probs(
                    agent, [prompt], [d.action_ids], temperature=settings.temperature
                )
            log_probs = scored.log_probs[0, : len(d.action_ids)].tolist()
            out.append(_Generation(prompt, list(d.action_ids), log_probs, d.text, d.finished))
        return out


def test_a_replayed_episode_is_exactly_an_unbranched_one_with_the_same_choices(tiny_path):
    policy = MultiAgentPolicy.from_pretrained(tiny_path, AGENTS, seed=0)
    settings = GenerationSettings(max_new_tokens=8, do_sample=True)
    plain = RolloutCollector(policy, [_env()], settings, seed=0)
    collector = branching_around(plain, BRANCH, _env)
    assert isinstance(collector, ReplayBranchingCollector)
    request = EpisodeRequest(seed=5, options={"index": 7})
    try:
        tree = collector.collect([request])
    finally:
        collector.close()
    assert [e.branch for e in tree] == [(0, 0, 0), (0, 0, 1), (0, 1, 0), (0, 1, 1)]
    assert [d.branch_copy for d in tree[3].decisions] == [True, True, False]
    for leaf in tree:
        again = RolloutCollector(ChosenPolicy(policy, leaf.decisions), [_env()], settings)
        try:
            (unbranched,) = again.collect([request])
        finally:
            again.close()
        assert len(unbranched.decisions) == len(leaf.decisions) == 3
        for x, y in zip(leaf.decisions, unbranched.decisions, strict=True):
            assert x.messages == y.messages
            assert x.prompt_ids == y.prompt_ids
            assert x.action_ids == y.action_ids
            assert x.log_probs == pytest.approx(y.log_probs, abs=1e-4)
        assert leaf.team_return == unbranched.team_return


def _expected(episodes, batch, scale):
    leaves = {(e.group, *e.branch): e.team_return for e in episodes}
    samples = [
        ((e.group, *d.branch), d.agent)
        for e in episodes
        for d in e.decisions
        if not d.branch_copy and d.agent in set(batch.agents)
    ]
    return branch_advantages(leaves, samples, scale_rewards=scale).advantages


def test_grpo_trains_a_program_team_on_its_branched_advantages(tiny_path):
    policy = MultiAgentPolicy.from_pretrained(tiny_path, AGENTS, seed=0)
    small = {**SMALL, "iterations": 1, "episodes_per_iteration": 8, "max_new_tokens": 8}
    del small["critic_learning_rate"]
    config = GRPOConfig(num_generations=1, branch=BRANCH, scale_rewards="none", **small)
    trainer = GRPOTrainer(policy, _env, config)
    assert isinstance(trainer.collector, ReplayBranchingCollector)
    seen = []
    original = trainer.batch_advantages

    def spy(episodes, batch):
        out = original(episodes, batch)
        seen.append((episodes, batch, out))
        return out

    trainer.batch_advantages = spy
    before = {a: adapter_params(trainer, a) for a in AGENTS}
    try:
        record = trainer.train()[-1]
    finally:
        trainer.collector.close()
    episodes, batch, (advantages, _) = seen[-1]
    assert len(episodes) == 8 and record["rollout/episodes"] == 8
    # Per tree: 1 planner decision, 2 router alternatives, 4 solver continuations.
    assert len(batch) == 2 * (1 + 2 + 4)
    assert torch.allclose(advantages, _expected(episodes, batch, "none"), atol=1e-6)
    assert "branch/router/value_spread" in record
    assert any(changed(before[a], adapter_params(trainer, a)) for a in AGENTS)


def test_action_marft_trains_a_program_team_with_branch(tiny_path):
    policy = MultiAgentPolicy.from_pretrained(tiny_path, AGENTS, seed=0)
    small = {**SMALL, "iterations": 1, "episodes_per_iteration": 4, "max_new_tokens": 8}
    config = ActionMARFTConfig(branch=BRANCH, **small)
    trainer = ActionMARFTTrainer(policy, _env, config, critic=Critic(policy, seed=0))
    assert isinstance(trainer.collector, ReplayBranchingCollector)
    before = {a: adapter_params(trainer, a) for a in AGENTS}
    try:
        record = trainer.train()[-1]
    finally:
        trainer.collector.close()
    assert record["rollout/episodes"] == 4 and math.isfinite(record["train/policy_loss"])
    assert any(changed(before[a], adapter_params(trainer, a)) for a in AGENTS)
