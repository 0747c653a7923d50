"""Evaluate a trained team (a checkpoint from train_math.py) or an untuned model on held-out problems.

    python examples/evaluate.py --checkpoint runs/train_math/checkpoint-30
    python examples/evaluate.py --model marft-tiny-math --env math-single-v0 --episodes 500
    python examples/evaluate.py --checkpoint runs/x/checkpoint-30 --dataset math500.jsonl

Greedy decoding; reports accuracy overall and per graded agent. The agents and base model of a
checkpoint are read from its manifest.
"""

from __future__ import annotations

import argparse
import json

from rich.console import Console
from rich.table import Table
from train_math import _ints, _names, data_filters  # the sibling example script

import marft_envs
from marft_algos.evaluation import evaluation_requests, summarize_episodes
from marft_algos.policy import MultiAgentPolicy
from marft_algos.policy.checkpoint import load_checkpoint, read_manifest
from marft_algos.rollout import GenerationSettings, RolloutCollector
from marft_envs.math.data import load_dataset


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Held-out accuracy of a trained or untuned LLM team.")
    parser.add_argument("--checkpoint", default=None, help="Checkpoint folder written by a trainer (default: none, evaluate the untuned model).")
    parser.add_argument("--model", default=None, help="Base model when no checkpoint is given (default: marft-tiny-math).")
    parser.add_argument("--env", default="math-dual-v0", help="Registered env id (default: math-dual-v0).")
    parser.add_argument("--dataset", default="builtin:test", help="Problems to evaluate on (default: builtin:test).")
    parser.add_argument("--levels", type=_ints, default=None, help="Keep only these difficulty levels, e.g. 1,2, or 'all' (default: 1,2,3 with built-in data, else all).")
    parser.add_argument("--subjects", type=_names, default=None, help="Keep only these subjects (built-in data: generator families), or 'all' (default: digits with built-in data, else all).")
    parser.add_argument("--episodes", type=int, default=200, help="Number of problems, taken in order (default: 200).")
    parser.add_argument("--max-new-tokens", type=int, default=48, help="Longest action in tokens (default: 48).")
    parser.add_argument("--max-new-tokens-per-agent", type=json.loads, default={"actor": 16}, help='Per-agent caps as JSON (default: {"actor": 16}).')
    parser.add_argument("--batch", type=int, default=32, help="Env copies generated together (default: 32).")
    parser.add_argument("--json", action="store_true", help="Print the metrics as JSON instead of a table.")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    dataset = load_dataset(args.dataset, **data_filters(args.dataset, args.levels, args.subjects))
    env_fn = lambda: marft_envs.make(args.env, dataset=dataset)  # noqa: E731
    agents = env_fn().possible_agents
    if args.checkpoint is not None:
        manifest = read_manifest(args.checkpoint)
        if list(manifest["agents"]) != list(agents):
            raise SystemExit(
                f"The checkpoint's agents {manifest['agents']} do not match {args.env}'s agents {agents}; "
                f"pass the --env it was trained on."
            )
        model = args.model or manifest["base_models"][agents[0]]
        policy = MultiAgentPolicy.from_pretrained(model, agents)
        load_checkpoint(args.checkpoint, policy, restore_rng=False)
    else:
        policy = MultiAgentPolicy.from_pretrained(args.model or "marft-tiny-math", agents)
    settings = GenerationSettings(
        max_new_tokens=args.max_new_tokens,
        max_new_tokens_per_agent=args.max_new_tokens_per_agent,
        do_sample=False,
    )
    collector = RolloutCollector.from_factory(policy, env_fn, args.batch, settings)
    episodes = collector.collect(evaluation_requests(collector, args.episodes))
    metrics = summarize_episodes(episodes, "eval")
    if args.json:
        print(json.dumps(metrics))
    else:
        table = Table(title=f"{args.env} on {args.dataset} ({len(episodes)} problems, greedy)")
        table.add_column("metric")
        table.add_column("value", justify="right")
        for key, value in metrics.items():
            table.add_row(key, f"{value:.3f}" if isinstance(value, float) else str(value))
        Console().print(table)
    return metrics


if __name__ == "__main__":
    main()
