"""Plain GRPO against branched GRPO (``branch={planner: {width: 3, rollouts: 4}}``) on
``choice-team-v1`` with the built-in model, at equal generated tokens, over seeds (README.md).

Each run trains from the untuned model until the policy has generated ``--budget`` tokens in
training rollouts (counted at ``generate``: a tree's shared prefix once), then evaluates greedily
on a fixed held-out set (``--held-out`` episodes of the test split, the same for every run), also
before training. Pilots for the recipe use ``--pilot``: training-split numbers only, no held-out
evaluation.

    OMP_NUM_THREADS=1 nice python benchmarks/branching/run.py --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared runner
sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (
    BRANCH,
    ENV_ID,
    MODEL,
    PER_TASK,
    TOKENS,
    count_tokens,
    grpo_config,
    held_out,
    make_policy,
    make_trainer,
    train_to_budget,
)
from runner import run_info

HERE = Path(__file__).resolve().parent


def _relative(path: Path) -> str:
    """``path`` from the repository root when it lies inside it (no machine's folder recorded)."""
    root = HERE.parents[1]
    resolved = path.resolve()
    return str(resolved.relative_to(root)) if resolved.is_relative_to(root) else path.name


def run_one(arm: str, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    start = time.perf_counter()
    policy = make_policy(seed)
    count = count_tokens(policy)
    before = None if args.pilot else held_out(policy, args.held_out)
    config = grpo_config(arm, seed=seed, lr=args.lr, tasks=args.tasks, temperature=args.temperature)
    trainer = make_trainer(arm, policy, config)
    tokens, decisions = dict(count.tokens), dict(count.decisions)  # the evaluation's, not counted
    try:
        rows = train_to_budget(trainer, count, args.budget, args.max_iterations)
    finally:
        trainer.close()
    train_tokens = {a: n - tokens.get(a, 0) for a, n in count.tokens.items()}
    train_decisions = {a: n - decisions.get(a, 0) for a, n in count.decisions.items()}
    after = None if args.pilot else held_out(policy, args.held_out)
    last = rows[-3:]
    result = {
        "arm": arm,
        "seed": seed,
        "iterations": len(rows),
        "episodes": sum(r["episodes"] or 0 for r in rows),
        "generated_tokens": sum(train_tokens.values()),
        "generated_tokens_by_agent": train_tokens,
        "decisions_by_agent": train_decisions,
        "train_last3": {
            "success": statistics.mean(r["success"] for r in last),
            "right_choice": statistics.mean(r["right_choice"] for r in last),
        },
        "held_out_before": before,
        "held_out_after": after,
        "curve": rows,
        "seconds": round(time.perf_counter() - start, 1),
    }
    print(
        f"{arm} seed {seed}: {len(rows)} it, {result['generated_tokens']} tokens, train (last 3) "
        f"success {result['train_last3']['success']:.3f} right {result['train_last3']['right_choice']:.3f}"
        + (
            f"; held-out success {before['success']:.3f} -> {after['success']:.3f}, right choice "
            f"{before['right_choice']:.3f} -> {after['right_choice']:.3f}"
            if before and after
            else ""
        )
        + f" ({result['seconds']} s)",
        flush=True,
    )
    return result


def spread(values: list[float]) -> dict[str, float]:
    return {
        "mean": round(statistics.mean(values), 4),
        "std": round(statistics.stdev(values), 4) if len(values) > 1 else 0.0,
        "min": round(min(values), 4),
        "max": round(max(values), 4),
    }


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for arm in sorted({r["arm"] for r in runs}):
        mine = [r for r in runs if r["arm"] == arm]
        row: dict[str, Any] = {
            "seeds": [r["seed"] for r in mine],
            "generated_tokens": spread([r["generated_tokens"] for r in mine]),
            "train_last3_right_choice": spread([r["train_last3"]["right_choice"] for r in mine]),
            "train_last3_success": spread([r["train_last3"]["success"] for r in mine]),
        }
        if all(r["held_out_after"] for r in mine):
            for when in ("before", "after"):
                for key in ("success", "right_choice"):
                    row[f"held_out_{key}_{when}"] = spread(
                        [r[f"held_out_{when}"][key] for r in mine]
                    )
        summary[arm] = row
    return summary


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arms", nargs="+", default=["plain", "branched"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--budget", type=int, default=40_000, help="generated tokens per run")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--tasks", type=int, default=4, help="tasks per iteration (x12 episodes)")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--held-out", type=int, default=120, help="greedy test-split episodes")
    parser.add_argument("--max-iterations", type=int, default=1000)
    parser.add_argument("--pilot", action="store_true", help="training split only (no held-out)")
    parser.add_argument("--out", type=Path, default=HERE / "results.json")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    start = time.perf_counter()
    runs = [run_one(arm, seed, args) for seed in args.seeds for arm in args.arms]
    result = {
        "env": ENV_ID,
        "model": MODEL,
        "branch": BRANCH,
        "episodes_per_task": PER_TASK,
        "max_new_tokens": TOKENS,
        "settings": {k: _relative(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "summary": summarize(runs),
        "runs": runs,
        "seconds": round(time.perf_counter() - start, 1),
        "run_info": run_info([ENV_ID]),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result["summary"], indent=1))
    return result


if __name__ == "__main__":
    main()
