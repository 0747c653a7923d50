"""What the branching benchmark's scripts share: the team, the two GRPO arms, a count of the
tokens the policy generates, and the greedy held-out evaluation (README.md)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import marft_envs
from marft_algos.policy import MultiAgentPolicy
from marft_algos.protocols import GenerationSettings
from marft_algos.rollout.collector import Episode, EpisodeRequest, RolloutCollector
from marft_algos.rollout.evaluation import EVAL_SEED_OFFSET
from marft_algos.trainers.grpo import GRPOConfig, GRPOTrainer

ENV_ID = "choice-team-v1"
MODEL = "marft-tiny-math"
AGENTS = ("planner", "solver")
CHOOSER = "planner"
#: Token budget per message: the planner's choice is its first symbol; the solver writes two
#: steps and a box: 21-22 tokens, or 40 when it restates a product first (the built-in model's
#: long style), which a 32-token cap cuts before the box.
TOKENS = {"planner": 8, "solver": 48}
#: The branch setting of the branched arm: 3 alternatives, each continued by 4 solvers.
BRANCH = {CHOOSER: {"width": 3, "rollouts": 4}}
#: Episodes of one task in either arm: a tree of 3 x 4, or a GRPO group of 12.
PER_TASK = 12


def env_fn(split: str = "train") -> Any:
    return marft_envs.make(ENV_ID, split=split)


@dataclass
class TokenCount:
    """Tokens and decisions the policy generated (every ``generate`` call), per agent."""

    tokens: Counter[str] = field(default_factory=Counter)
    decisions: Counter[str] = field(default_factory=Counter)

    @property
    def total(self) -> int:
        return sum(self.tokens.values())


def count_tokens(policy: MultiAgentPolicy) -> TokenCount:
    """Wrap ``policy.generate`` so that every generated token is counted (a branch tree's shared
    prefix is generated once, so it is counted once)."""
    count = TokenCount()
    generate = policy.generate

    def counting(agent: str, batch: Any, settings: Any, **kwargs: Any) -> Any:
        out = generate(agent, batch, settings, **kwargs)
        count.tokens[agent] += sum(len(g.action_ids) for g in out)
        count.decisions[agent] += len(out)
        return out

    policy.generate = counting  # type: ignore[method-assign]
    return count


def make_policy(seed: int) -> MultiAgentPolicy:
    return MultiAgentPolicy.from_pretrained(MODEL, list(AGENTS), seed=seed)


def grpo_config(arm: str, *, seed: int, lr: float, tasks: int, temperature: float) -> GRPOConfig:
    """The arm's config: ``tasks`` tasks per iteration, 12 episodes each (a group of 12 samples
    from the start, or a tree of 3 planner alternatives x 4 solver continuations)."""
    episodes = tasks * PER_TASK
    return GRPOConfig(
        iterations=10_000,  # the runner stops at the token budget
        episodes_per_iteration=episodes,
        rollout_threads=min(episodes, 64),
        num_generations=PER_TASK if arm == "plain" else 1,
        branch=None if arm == "plain" else BRANCH,
        learning_rate=lr,
        temperature=temperature,
        max_new_tokens=max(TOKENS.values()),
        max_new_tokens_per_agent=dict(TOKENS),
        seed=seed,
        checkpoint_every=0,
    )


def make_trainer(arm: str, policy: MultiAgentPolicy, config: GRPOConfig) -> GRPOTrainer:
    if arm not in ("plain", "branched"):
        raise ValueError(f"arm must be 'plain' or 'branched', got {arm!r}.")
    return GRPOTrainer(policy, env_fn, config)


def outcome(episodes: Sequence[Episode]) -> dict[str, Any]:
    """Success, the chooser's right-choice rate and, per right operation, its rate."""
    n = len(episodes)
    per_op: dict[str, list[float]] = {}
    for e in episodes:
        per_op.setdefault(e.info["operation"], []).append(e.info["reward_parts"]["right_choice"])
    return {
        "episodes": n,
        "success": sum(bool(e.info.get("correct")) for e in episodes) / n,
        "right_choice": sum(e.info["reward_parts"]["right_choice"] for e in episodes) / n,
        "right_choice_by_operation": {
            op: round(sum(v) / len(v), 4) for op, v in sorted(per_op.items())
        },
    }


def held_out(policy: MultiAgentPolicy, episodes: int) -> dict[str, Any]:
    """Greedy episodes on the test split, episode ``i`` reset with seed ``EVAL_SEED_OFFSET + i``:
    the same fixed set for every run."""
    settings = GenerationSettings(
        max_new_tokens=max(TOKENS.values()),
        max_new_tokens_per_agent=dict(TOKENS),
        do_sample=False,
    )
    collector = RolloutCollector.from_factory(
        policy, lambda: env_fn("test"), min(episodes, 64), settings, seed=0
    )
    requests = [EpisodeRequest(seed=EVAL_SEED_OFFSET + i) for i in range(episodes)]
    start = time.perf_counter()
    result = outcome(collector.collect(requests))
    collector.close()
    result["seconds"] = round(time.perf_counter() - start, 1)
    return result


def train_to_budget(
    trainer: GRPOTrainer, count: TokenCount, budget: int, max_iterations: int = 1000
) -> list[dict[str, Any]]:
    """Iterations until the policy has generated ``budget`` tokens in training; one row each."""
    rows: list[dict[str, Any]] = []
    start = count.total
    while count.total - start < budget and len(rows) < max_iterations:
        t0 = time.perf_counter()
        metrics = trainer.train_iteration()
        rows.append(
            {
                "iteration": trainer.iteration,
                "tokens": count.total - start,
                "episodes": metrics.get("rollout/episodes"),
                "success": metrics.get("rollout/accuracy"),
                "right_choice": metrics.get("rollout/reward/right_choice"),
                "planner_entropy": metrics.get(f"train/entropy/{CHOOSER}"),
                "planner_value_spread": metrics.get(f"branch/{CHOOSER}/value_spread"),
                "seconds": round(time.perf_counter() - t0, 2),
            }
        )
    return rows
