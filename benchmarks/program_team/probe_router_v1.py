"""The router of ``support-desk-v1`` trained alone, on the TRAINING split, with and without GRPO's
group std scaling: a diagnostic for the next protocol, not a result (no held-out task is used).

In every tuned v1 job the router collapsed onto one department (RESULTS.md, "support-desk-v1").
The suspected cause: the team reward's small observable parts (0.1 x parsed, 0.05 x verdict form)
become full-size advantages once each group's rewards are divided by their std, in groups
without a success (most of them), so every agent trains on the reviewer's form noise. Here the
three specialists and the reviewer are frozen (they act, never train): only the router learns,
from the same untuned SmolLM2-135M-Instruct, with v1's GRPO budget per iteration (12 episodes,
groups of 4, temperature 0.7, learning rate 5e-4, rank-8 LoRA), under

- ``--scale group``: v1's setting (``scale_rewards="group"``);
- ``--scale none``: the advantages are the rewards minus their group mean;

and optionally a KL penalty to the untuned router (``--beta``), an entropy bonus
(``--entropy-coef``), another learning rate or more episodes (tasks) per iteration.

Each iteration's rollouts give the router's entropy, the share of requests each department
received, and the rate of right routes and of team successes; they go to
``results/v1/probe_router/<scale>-seed<k>.json`` (and the run folder next to it).

    python benchmarks/program_team/probe_router_v1.py --scale group --seed 0
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import team_v1
from run_v1 import MAX_CHUNK_TOKENS, MODEL

import marft_envs
from marft_algos.policy import AgentSpec, LoraSettings, MultiAgentPolicy
from marft_algos.trainers.grpo import GRPOConfig, GRPOTrainer

OUT = Path(__file__).parent / "results" / "v1" / "probe_router"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", choices=["group", "none"], required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--iterations", type=int, default=6)
    parser.add_argument("--beta", type=float, default=0.0, help="KL to the untuned router")
    parser.add_argument("--entropy-coef", type=float, default=0.0)
    parser.add_argument("--learning-rate", type=float, default=5e-4)
    parser.add_argument("--episodes", type=int, default=12, help="per iteration, groups of 4")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    torch.set_num_threads(1)
    team_v1.team.check_split()
    team_v1.register()
    extra = (f"-beta{args.beta:g}" if args.beta else "") + (
        f"-entropy{args.entropy_coef:g}" if args.entropy_coef else ""
    )
    extra += (f"-lr{args.learning_rate:g}" if args.learning_rate != 5e-4 else "") + (
        f"-episodes{args.episodes}" if args.episodes != 12 else ""
    )
    name = f"{args.scale}{extra}-seed{args.seed}"
    frozen = {agent: AgentSpec(trainable=False) for agent in team_v1.AGENTS if agent != "router"}
    policy = MultiAgentPolicy.from_pretrained(
        MODEL,
        team_v1.AGENTS,
        specs=frozen,
        lora=LoraSettings(r=8, alpha=16),
        seed=args.seed,
        temperature=0.7,
    )
    config = GRPOConfig(
        iterations=args.iterations,
        episodes_per_iteration=args.episodes,
        rollout_threads=args.episodes,
        num_generations=4,
        scale_rewards=args.scale,
        beta=args.beta,
        entropy_coef=args.entropy_coef,
        temperature=0.7,
        learning_rate=args.learning_rate,
        max_new_tokens=max(team_v1.TOKENS.values()),
        max_new_tokens_per_agent=dict(team_v1.TOKENS),
        max_chunk_tokens=MAX_CHUNK_TOKENS,
        seed=args.seed,
        output_dir=str(args.out / "runs" / name),
        checkpoint_every=0,
        overwrite=True,
    )
    env_fn = lambda: marft_envs.make(team_v1.ENV_ID, split="train")  # noqa: E731
    start = time.perf_counter()
    trainer = GRPOTrainer(policy, env_fn, config)
    try:
        records = trainer.train()
    finally:
        trainer.close()
    rows = []
    for r in records:
        if "train/entropy/router" not in r:
            continue
        calls = {d: r.get(f"rollout/calls/{d}", 0.0) for d in team_v1.DEPARTMENTS}
        total = sum(calls.values()) or 1.0
        rows.append(
            {
                "iteration": r["iteration"],
                "router_entropy": r["train/entropy/router"],
                "route_shares": {d: round(c / total, 3) for d, c in calls.items()},
                "right_route": r.get("rollout/reward/routed"),
                "success": r.get("rollout/reward/success"),
                "reward_mean": r.get("rollout/reward_mean"),
            }
        )
    result = {
        "scale_rewards": args.scale,
        "beta": args.beta,
        "entropy_coef": args.entropy_coef,
        "learning_rate": args.learning_rate,
        "episodes_per_iteration": args.episodes,
        "seed": args.seed,
        "model": MODEL,
        "split": "train",
        "iterations": rows,
        "seconds": round(time.perf_counter() - start, 1),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{name}.json").write_text(json.dumps(result, indent=1) + "\n")
    for row in rows:
        shares = " ".join(f"{d}={s:.2f}" for d, s in row["route_shares"].items())
        print(
            f"{name} it {row['iteration']}: router entropy {row['router_entropy']:.3f}, "
            f"{shares}, right route {row['right_route']}, success {row['success']}"
        )


if __name__ == "__main__":
    main()
