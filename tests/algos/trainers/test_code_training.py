"""Training on the code envs: trainers run on code-dual-v2, and batched rollouts grade in parallel."""

from __future__ import annotations

import math
from typing import NamedTuple

import pytest
from test_trainers import SMALL as TRAINER_BUDGET

import marft_envs
from marft_algos.policy import MultiAgentPolicy
from marft_algos.policy.critic import Critic
from marft_algos.rollout.collector import RolloutCollector
from marft_algos.trainers.action_marft import ActionMARFTConfig, ActionMARFTTrainer
from marft_algos.trainers.grpo import GRPOConfig, GRPOTrainer
from marft_algos.trainers.token_marft import TokenMARFTConfig, TokenMARFTTrainer
from marft_envs.sandbox.runner import available_isolation

pytestmark = pytest.mark.skipif(
    available_isolation() is None, reason="no code sandbox can run here"
)

#: The trainer tests' budget, one iteration, without the critic's rate (the critic-free configs).
SMALL = {k: v for k, v in TRAINER_BUDGET.items() if k != "critic_learning_rate"} | {
    "iterations": 1,
    "eval_episodes": 2,
}


def env_fn():
    return marft_envs.make("code-dual-v2", dataset="builtin:train")


@pytest.mark.parametrize("kind", ["action", "token", "grpo"])
def test_trainers_run_on_code_dual(kind, tiny_path):
    policy = MultiAgentPolicy.from_pretrained(tiny_path, ["tester", "coder"], seed=0)
    eval_fn = lambda: marft_envs.make("code-dual-v2", dataset="builtin:test")  # noqa: E731
    if kind == "grpo":
        trainer = GRPOTrainer(
            policy, env_fn, GRPOConfig(**SMALL, num_generations=2, seed=0), eval_env_fn=eval_fn
        )
    else:
        config_cls, trainer_cls = {
            "action": (ActionMARFTConfig, ActionMARFTTrainer),
            "token": (TokenMARFTConfig, TokenMARFTTrainer),
        }[kind]
        config = config_cls(**SMALL, critic_learning_rate=1e-3, seed=0)
        trainer = trainer_cls(
            policy, env_fn, config, critic=Critic(policy, seed=0), eval_env_fn=eval_fn
        )
    records = trainer.train()
    assert [r["iteration"] for r in records] == [0, 1]
    last = records[-1]
    # Six random tokens never make a fenced program: the tiny model scores 0, as expected.
    assert last["rollout/reward_mean"] == 0.0
    if kind == "grpo":
        assert last["rollout/zero_std_fraction"] == 1.0  # equal rewards: no GRPO signal
        assert last["train/skipped_empty"] == 1 and "train/policy_loss" not in last  # no step
    else:
        assert (
            math.isfinite(last["train/policy_loss"])
            and math.isfinite(last["train/entropy"])
            and math.isfinite(last["train/value_loss"])
        )
    assert records[0]["eval/accuracy"] == 0.0


class Gen(NamedTuple):
    prompt_ids: list[int]
    action_ids: list[int]
    log_probs: list[float]
    text: str
    finished: bool


class ReferencePolicy:
    """The tester writes a note; the coder answers with the problem's reference solution."""

    def __init__(self, envs):
        self.envs = envs

    def generate(self, agent, messages_batch, settings, *, generator=None):
        out = []
        for messages in messages_batch:
            if agent == "coder":
                env = next(
                    e
                    for e in self.envs
                    if e.agent_selection == "coder" and e.observe("coder")["messages"] == messages
                )
                text = f"```python\n{env.unwrapped.problem.reference}\n```"
            else:
                text = "Check empty inputs."
            out.append(Gen([1], [1], [-0.1], text, True))
        return out


def test_batched_rollout_grades_every_copy_through_the_worker_pool():
    envs = [env_fn() for _ in range(3)]
    started = []
    for env in envs:
        original = env.unwrapped.prepare_step

        def spy(action, original=original, env=env):
            original(action)
            started.append(len(env.unwrapped._pending))

        env.unwrapped.prepare_step = spy
    collector = RolloutCollector(ReferencePolicy(envs), envs, seed=0)
    episodes = collector.collect(6)
    assert all(
        e.team_return == 1.0 and e.info["tests_passed"] == e.info["tests_total"] for e in episodes
    )
    # Every coder action was submitted to the pool before any copy stepped.
    assert started.count(1) == 6
