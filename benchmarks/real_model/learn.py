"""Does RL visibly improve a real pretrained LLM on a CPU? SmolLM2-135M-Instruct, a few minutes a seed.

The setting (chosen from measurements of the untuned model, see RESULTS.md): single-digit
arithmetic chains from the built-in generator (``digits`` family, one or two operations), the
``math-single-v7`` env with a one-line actor profile that shows the ``\\boxed{}`` format, short
actions (32 tokens), rollouts sampled at temperature 0.5 (at 1.0 this 135M model's samples are
mostly off-topic and never solve a problem), GRPO with groups of 8, and LoRA (r 8) on every linear
layer. Held-out accuracy is greedy, on the built-in test split (problem texts never in the training
split), before and after training, for every seed.

Run (one thread; about 10 minutes a seed on a shared, busy 2-core machine)::

    python benchmarks/real_model/learn.py --seeds 0 1 --json benchmarks/real_model/learn.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

import marft_envs
from marft_algos.cli import ALGORITHMS, build_trainer
from marft_algos.policy import LoraSettings, MultiAgentPolicy
from marft_envs import AgentProfile
from marft_envs.math.data import load_dataset

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared runner
from runner import run_info

#: The actor's profile: math-single-v7's instruction plus an example of the answer format and a
#: request for brevity (the untuned model greedily solves 6% of 50 held-out problems with it, 0% of
#: 32 with the env's default profile, which it answers with long derivations and rarely a box).
PROFILE = AgentProfile(
    "actor",
    "Solve the math problem. Give the final answer in \\boxed{}, for example \\boxed{42}. Be brief.",
    graded=True,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--algo", choices=sorted(ALGORITHMS), default="grpo")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--iterations", type=int, default=6)
    parser.add_argument("--episodes-per-iteration", type=int, default=48)
    parser.add_argument("--num-generations", type=int, default=8, help="GRPO group size")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--temperature", type=float, default=0.5)
    parser.add_argument("--learning-rate", type=float, default=5e-4)
    parser.add_argument("--eval-episodes", type=int, default=60)
    parser.add_argument("--lora-rank", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--output-dir", default=None, help="run folders (metrics.jsonl) per seed")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    choice = {"subjects": ["digits"], "levels": [1, 2]}
    train_set = load_dataset("builtin:train", size=1000, **choice)
    eval_set = load_dataset("builtin:test", size=args.eval_episodes, **choice)
    env_fn = lambda: marft_envs.make("math-single-v7", dataset=train_set, profiles=[PROFILE])  # noqa: E731
    eval_fn = lambda: marft_envs.make("math-single-v7", dataset=eval_set, profiles=[PROFILE])  # noqa: E731
    config_class, _ = ALGORITHMS[args.algo]
    results = []
    for seed in args.seeds:
        start = time.perf_counter()
        settings = dict(
            iterations=args.iterations,
            episodes_per_iteration=args.episodes_per_iteration,
            rollout_threads=args.episodes_per_iteration,
            max_new_tokens=args.max_new_tokens,
            temperature=args.temperature,
            learning_rate=args.learning_rate,
            eval_episodes=args.eval_episodes,
            seed=seed,
            output_dir=None if args.output_dir is None else f"{args.output_dir}/seed{seed}",
        )
        if args.algo == "grpo":
            settings["num_generations"] = args.num_generations
        else:
            settings.update(critic_learning_rate=1e-4, entropy_coef=0.0)
        config = config_class(**settings)
        # The policy's temperature is its log-prob convention: the same as the rollouts' sampling.
        policy = MultiAgentPolicy.from_pretrained(
            args.model,
            ["actor"],
            lora=LoraSettings(r=args.lora_rank, alpha=2 * args.lora_rank),
            seed=seed,
            temperature=args.temperature,
        )
        trainer = build_trainer(
            args.algo, policy, env_fn, config, eval_env_fn=eval_fn, critic_seed=seed
        )
        records = trainer.train()
        evals = [r for r in records if "eval/accuracy" in r]
        row = {
            "seed": seed,
            "before": evals[0]["eval/accuracy"],
            "after": evals[-1]["eval/accuracy"],
            "cut_before": evals[0].get("eval/action_cut_fraction"),
            "cut_after": evals[-1].get("eval/action_cut_fraction"),
            "rollout_reward": [r.get("rollout/reward_mean") for r in records[1:]],
            "approx_kl": [
                r.get("train/approx_kl_last", r.get("train/approx_kl")) for r in records[1:]
            ],
            "seconds": time.perf_counter() - start,
        }
        results.append(row)
        print(json.dumps(row), flush=True)
    gains = [r["after"] - r["before"] for r in results]
    summary = {
        "args": vars(args) | {"json": str(args.json)},
        "seeds": results,
        "mean_before": sum(r["before"] for r in results) / len(results),
        "mean_after": sum(r["after"] for r in results) / len(results),
        "mean_gain": sum(gains) / len(gains),
    }
    print(
        f"held-out greedy accuracy: before {summary['mean_before']:.3f} -> after "
        f"{summary['mean_after']:.3f} ({100 * summary['mean_gain']:+.1f} points, mean of "
        f"{len(results)} seeds)"
    )
    if args.json:
        summary["run_info"] = run_info(["math-single-v3"])
        args.json.write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
