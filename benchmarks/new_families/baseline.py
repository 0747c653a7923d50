"""Untuned held-out accuracy of a model on the puzzle, debate and tool-use ids (greedy decoding).

Each id is evaluated on the same pinned held-out episodes marft train uses
(:func:`marft_algos.rollout.evaluation.evaluation_requests`: the test split of the puzzles, problems
0..N-1 of the built-in math test split for the math-data ids), with fresh (zero-effect) LoRA
adapters, i.e. the base model. Prints one JSON line per id: accuracy, its binomial standard error,
and how often the graded answer could be read at all.

    python benchmarks/new_families/baseline.py --episodes 50 --max-new-tokens 128 \
        --json benchmarks/new_families/baseline.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch

import marft_envs
from marft_algos.policy import MultiAgentPolicy
from marft_algos.rollout.collector import GenerationSettings, RolloutCollector
from marft_algos.rollout.evaluation import evaluation_requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared runner
from runner import portable_path, run_info

DEFAULT_IDS = [
    "sudoku-single-v1",
    "sudoku-dual-v1",
    "planpath-single-v1",
    "planpath-dual-v1",
    "tool-math-single-v7",
    "tool-math-dual-v7",
    "math-single-v7",
    "debate-v7",
]
#: Held-out arguments per id: the puzzles' test split, the math family's built-in test split.
MATH_DATA = {"dataset": "builtin:test"}


def held_out_kwargs(env_id: str) -> dict:
    spec = marft_envs.spec(env_id)
    if spec.accepts("split"):
        return {"split": "test"}
    if spec.accepts("dataset"):
        return dict(MATH_DATA)
    return {}


def readable(info: dict) -> bool:
    """Whether the graded answer could be read (a grid, a path, a \\boxed{} answer)."""
    if "verdict" in info:  # debate: a verdict that picks a solver
        return info["failure"] is None
    if "failure" in info:
        return info["failure"] not in ("no_grid", "no_path", "not_graded")
    return info.get("answer_given") is not None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--ids", nargs="+", default=DEFAULT_IDS)
    parser.add_argument("--episodes", type=int, default=50)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--batch", type=int, default=25)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    settings = GenerationSettings(max_new_tokens=args.max_new_tokens, do_sample=False)
    rows = []
    for env_id in args.ids:
        start = time.perf_counter()
        kwargs = held_out_kwargs(env_id)
        env_fn = lambda env_id=env_id, kwargs=kwargs: marft_envs.make(env_id, **kwargs)  # noqa: E731
        agents = list(env_fn().possible_agents)
        policy = MultiAgentPolicy.from_pretrained(args.model, agents, seed=0)
        collector = RolloutCollector.from_factory(policy, env_fn, args.batch, settings, seed=0)
        episodes = collector.collect(evaluation_requests(collector, args.episodes), settings)
        n = len(episodes)
        correct = sum(bool(e.info.get("correct")) for e in episodes)
        p = correct / n
        decisions = [d for e in episodes for d in e.decisions]
        row = {
            "id": env_id,
            "env_kwargs": kwargs,
            "episodes": n,
            "correct": correct,
            "accuracy": p,
            "standard_error": math.sqrt(p * (1 - p) / n),
            "answer_readable": sum(readable(e.info) for e in episodes) / n,
            "actions_cut": sum(not d.finished for d in decisions) / len(decisions),
            "mean_decisions": len(decisions) / n,
            "seconds": round(time.perf_counter() - start, 1),
            "example": [[d.agent, d.text[:400]] for d in episodes[0].decisions],
        }
        print(json.dumps(row), flush=True)
        rows.append(row)
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                {
                    "args": vars(args) | {"json": portable_path(args.json)},
                    "rows": rows,
                    "run_info": run_info(args.ids),
                },
                indent=2,
            )
            + "\n"
        )


if __name__ == "__main__":
    main()
