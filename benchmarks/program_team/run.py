"""Does a team of real LLMs, trained as the program it is, learn to stop breaking? One job per
``setting:seed``, on SmolLM2-135M-Instruct and the support desk of ``team.py``.

Settings, at one budget (iterations x episodes, and tokens per call), all from the same untuned
model, evaluated greedily on the same 200 held-out tasks:

- ``marft``: action-level MARFT on the team reward (one LoRA adapter per agent, a critic on the
  frozen base);
- ``grpo``: GRPO for every agent on the team reward (groups of ``--num-generations`` episodes of
  one task);
- ``independent``: the same trainer as ``marft``, but each agent is paid its own local reward
  (router: the right department; specialist: a right answer; reviewer: a right verdict) instead
  of the team's.

The untuned team is every job's evaluation before training. Each job writes
``<out>/<setting>-seed<k>.json``: greedy held-out success before, during and after training; the
reward parts (hand-offs parsed, routes right, reviewer approvals, false approvals and rejections,
calls); the noise check (the router's replies replaced by noise) before and after; the rollout
reward per iteration. The run folder ``<out>/runs/<setting>-seed<k>`` keeps metrics.jsonl, the
transcripts and the final adapters (for ``marft eval RUN --attribution``).

    python benchmarks/program_team/run.py --jobs marft:0 grpo:0 independent:0 ...
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared runner
import team
from runner import job_arguments, job_config, job_trainer, run_jobs

import marft_envs
from marft_algos.cli import ALGORITHMS
from marft_algos.rollout.attribution import (
    SettingsPolicy,
    attribution_rows,
    attribution_settings,
    collect_settings,
)
from marft_algos.rollout.collector import RolloutCollector
from marft_algos.rollout.evaluation import NoisyMessages, evaluation_requests, greedy
from marft_envs.core.env import Transition
from marft_envs.programs import ProgramEnv

MODEL = "smollm2-135m-instruct"
SETTINGS = {"marft": "action-marft", "grpo": "grpo", "independent": "action-marft"}
PARTS = ("success", "cost", "parsed", "routed", "approved", "false_approval", "false_rejection")


class IndependentDesk(ProgramEnv):
    """The support desk, each agent paid its own local reward at the episode's end."""

    def _final(self, event: Any) -> Transition:
        result = super()._final(event)
        parts = result.info.get("reward_parts")
        if not parts:
            return result
        calls = result.info.get("calls", {})
        local = {"router": parts["routed"]}
        for department in team.DEPARTMENTS:
            if calls.get(department):
                local[department] = parts["success"]
        if calls.get("reviewer"):
            local["reviewer"] = 1.0 - parts["false_approval"] - parts["false_rejection"]
        team_reward = parts["success"] + parts["cost"]
        return Transition(local, result.terminated, result.info, team_reward=team_reward)


def env_fn(setting: str, split: str) -> Any:
    if setting == "independent" and split == "train":
        return lambda: IndependentDesk(
            team.support_desk,
            team.AGENTS,
            team.make_tasks("train"),
            test_tasks=team.test_tasks(),
            reward_weights=team.WEIGHTS,
            max_calls=8,
            credit="team",
        )
    return lambda: marft_envs.make(team.ENV_ID, split=split)


def part_means(done: list[Any]) -> dict[str, float]:
    """The mean of each reward part, calls per episode and the episodes' count."""
    out = {
        part: sum(e.info.get("reward_parts", {}).get(part, 0.0) for e in done) / len(done)
        for part in PARTS
    }
    out["calls"] = sum(sum(e.info.get("calls", {}).values()) for e in done) / len(done)
    out["episodes"] = len(done)
    return out


def evaluate(policy: Any, config: Any, episodes: int, seed: int, noisy: bool) -> dict[str, float]:
    """Greedy held-out success and the mean of each reward part (router replaced by noise when
    ``noisy``)."""
    generator = NoisyMessages(policy, ["router"], seed=seed) if noisy else policy
    settings = greedy(config.generation)
    make = env_fn("marft", "test")
    collector = RolloutCollector.from_factory(generator, make, 50, settings, seed=seed)
    done = collector.collect(evaluation_requests(collector, episodes), settings)
    for env in collector.envs:
        env.close()
    return part_means(done)


def attribution(policy: Any, config: Any, episodes: int, seed: int) -> dict[str, Any]:
    """Which agent's tuning carries the gain: the held-out greedy episodes with each agent alone
    reverted to the base model and alone tuned (``marft eval RUN --attribution``), and the reward
    parts of the whole team tuned and untuned (the same episodes)."""
    wrapped = SettingsPolicy(policy)
    settings = greedy(config.generation)
    collector = RolloutCollector.from_factory(
        wrapped, env_fn("marft", "test"), 50, settings, seed=seed
    )
    requests = evaluation_requests(collector, episodes)

    def collect() -> list[Any]:
        collector.generator = torch.Generator().manual_seed(seed)
        return collector.collect(requests, settings)

    chosen = attribution_settings(team.AGENTS)
    done = collect_settings(wrapped, collect, chosen)
    for env in collector.envs:
        env.close()
    return {
        "rows": attribution_rows(chosen, done),
        "parts_tuned": part_means(done[frozenset()]),
        "parts_untuned": part_means(done[frozenset(team.AGENTS)]),
        "generations": {"run": wrapped.generated, "reused": wrapped.reused},
    }


def run_job(setting: str, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    algorithm = SETTINGS[setting]
    settings = job_config(args, setting, seed, algorithm, max_new_tokens=args.max_new_tokens)
    config = ALGORITHMS[algorithm][0](**settings)
    start = time.perf_counter()
    trainer = job_trainer(
        args,
        algorithm,
        team.AGENTS,
        config,
        seed,
        env_fn(setting, "train"),
        env_fn(setting, "test"),
    )
    policy = trainer.policy
    row: dict[str, Any] = {"setting": setting, "algorithm": algorithm, "seed": seed}
    row["noise_before"] = evaluate(policy, config, args.eval_episodes, seed, noisy=True)
    # A job cut off later still leaves this (the run folder keeps the curve and transcripts).
    partial = args.out / f"{setting}-seed{seed}.partial.json"
    partial.write_text(json.dumps(row, indent=1) + "\n")
    try:
        records = trainer.train()
    finally:
        trainer.close()
    evals = [r for r in records if "eval/accuracy" in r]
    row.update(
        before=evals[0]["eval/accuracy"],
        after=evals[-1]["eval/accuracy"],
        curve=[[r["iteration"], r["eval/accuracy"]] for r in evals],
        rollout_reward=[
            r.get("rollout/reward_mean") for r in records if "rollout/reward_mean" in r
        ],
        eval_episodes=evals[-1]["eval/episodes"],
        noise_after=evaluate(policy, config, args.eval_episodes, seed, noisy=True),
    )
    found = attribution(policy, config, args.eval_episodes, seed)
    row.update(
        parts_before=found["parts_untuned"],
        parts_after=found["parts_tuned"],
        attribution=found["rows"],
        attribution_generations=found["generations"],
        device=str(args.device),
    )
    row["seconds"] = round(time.perf_counter() - start, 1)
    partial.unlink()
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    job_arguments(
        parser,
        MODEL,
        Path(__file__).parent / "results",
        iterations=12,
        episodes_per_iteration=32,
        eval_every=6,
        eval_episodes=200,
        num_generations=4,
        temperature=0.7,
    )
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument(
        "--device", default="cpu", help="torch device: cpu, cuda (bfloat16 weights there)"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    team.check_split()
    team.register()
    args.out.mkdir(parents=True, exist_ok=True)
    run_jobs(args, list(SETTINGS), run_job, lambda setting: [team.ENV_ID])


if __name__ == "__main__":
    main()
