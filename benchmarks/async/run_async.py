"""Synchronous against asynchronous training (``max_staleness=1``): iteration wall time and
held-out accuracy, back to back in one run.

**Timing.** For each algorithm (GRPO, action-level MARFT) and model (the built-in one, SmolLM2-135M)
the same run is made twice from the same initial weights, once per loop: ``--iterations``
iterations with the model's ``marft train`` preset, one torch thread per process, no evaluation
and no checkpoints (the work compared is rollout + update), and for GRPO
``skip_zero_advantages=False``, so that every completion runs through the update in both loops
whatever the rewards (equal work). Each iteration's wall time is taken
around ``Trainer.train_iteration``; the first iteration is reported apart (the asynchronous one
starts the worker and cannot overlap), and the speed-up is the ratio of the mean steady-state
iteration times (iterations 2..N), as iterations per hour. With ``--repeats R`` the two loops
alternate (sync first, then async first, ...).

**Accuracy.** The main job (``benchmarks/configs/main_job.yaml``: action-level MARFT, built-in
team, 40 iterations) over ``--seeds`` with each loop, through ``benchmarks/sweep.py``: final
held-out accuracy per seed, mean and standard deviation.

One command runs everything and writes one JSON (``--smoke``: a tiny budget, to check the script)::

    python benchmarks/async/run_async.py --json benchmarks/async/results.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

ENV = "math-dual-v7"
ALGORITHMS = ("grpo", "action-marft")
MODELS = ("marft-tiny-math", "smollm2-135m-instruct")
SMOKE = {
    "episodes_per_iteration": 8,
    "rollout_threads": 8,
    "max_new_tokens": 8,
    "num_generations": 4,
}


def make_env() -> Any:
    import marft_envs

    return marft_envs.make(ENV)


def build(
    algorithm: str, model: str, staleness: int, iterations: int, smoke: bool, episodes: int | None
) -> Any:
    """The trainer of one timed run: the model's preset, this loop, no evaluation."""
    from marft_algos.cli.presets import preset_for
    from marft_algos.policy import MultiAgentPolicy
    from marft_algos.trainers.registry import ALGORITHMS as REGISTRY
    from marft_algos.trainers.registry import build_trainer

    config_class = REGISTRY[algorithm][0]
    known = {f.name for f in fields(config_class)}
    settings = {**preset_for(model, algorithm=algorithm), **(SMOKE if smoke else {})}
    if episodes:
        settings.update(episodes_per_iteration=episodes, rollout_threads=episodes)
    settings = {k: v for k, v in settings.items() if k in known}
    settings.update(iterations=iterations, max_staleness=staleness, seed=0, eval_every=0)
    if "skip_zero_advantages" in known:
        # Equal work whatever the rewards: every completion runs through the update (a batch of
        # flat groups would otherwise make the update free in one loop and not the other).
        settings["skip_zero_advantages"] = False
    config = config_class(**settings)
    agents = list(make_env().possible_agents)
    policy = MultiAgentPolicy.from_pretrained(model, agents, seed=0)
    return build_trainer(algorithm, policy, make_env, config)


def time_run(
    algorithm: str, model: str, staleness: int, iterations: int, smoke: bool, episodes: int | None
) -> dict:
    trainer = build(algorithm, model, staleness, iterations, smoke, episodes)
    times, records = [], []
    try:
        for _ in range(iterations):
            start = time.perf_counter()
            records.append(trainer.train_iteration())
            times.append(time.perf_counter() - start)
    finally:
        trainer.close()
    steady = times[1:]
    return {
        "max_staleness": staleness,
        "iteration_s": [round(t, 3) for t in times],
        "first_iteration_s": round(times[0], 3),
        "steady_mean_s": round(statistics.fmean(steady), 3),
        "iterations_per_hour": round(3600 / statistics.fmean(steady), 1),
        "rollout_wait_s": [round(r["time/rollout_s"], 3) for r in records],
        "update_s": [round(r["time/update_s"], 3) for r in records],
        "staleness_max": [r.get("rollout/staleness_max") for r in records],
        "reward_mean": [r.get("rollout/reward_mean") for r in records],
    }


def timing(args: argparse.Namespace) -> list[dict[str, Any]]:
    cases = []
    models = MODELS[:1] if args.smoke else args.models
    for algorithm in args.algorithms:
        for model in models:
            runs: dict[int, list[dict]] = {0: [], 1: []}
            for repeat in range(args.repeats):
                order = (0, 1) if repeat % 2 == 0 else (1, 0)
                for staleness in order:
                    run = time_run(
                        algorithm, model, staleness, args.iterations, args.smoke, args.episodes
                    )
                    runs[staleness].append(run)
                    print(
                        f"{algorithm} {model} max_staleness={staleness}: steady "
                        f"{run['steady_mean_s']:.2f} s/iteration, first {run['first_iteration_s']:.2f} s",
                        flush=True,
                    )
            sync = statistics.fmean(r["steady_mean_s"] for r in runs[0])
            overlapped = statistics.fmean(r["steady_mean_s"] for r in runs[1])
            cases.append(
                {
                    "algorithm": algorithm,
                    "model": model,
                    "sync": runs[0],
                    "async": runs[1],
                    "speedup_iterations_per_hour": round(sync / overlapped, 3),
                }
            )
            print(f"  -> {sync / overlapped:.2f}x iterations per hour", flush=True)
    return cases


def accuracy(args: argparse.Namespace) -> dict[str, Any]:
    from sweep import main as sweep

    out = Path(args.output_dir)
    extra = ["--iterations", "2", "--eval-episodes", "16"] if args.smoke else []
    config = str(ROOT / "benchmarks" / "configs" / "main_job.yaml")
    seeds = [str(s) for s in args.seeds]
    results = {}
    for name, flags in (("sync", []), ("async", ["--max-staleness", "1"])):
        summary = sweep(
            [config, "--seeds", *seeds, "--output-dir", str(out / name), "--", *extra, *flags]
        )
        results[name] = {
            "final_accuracy": [r["final_accuracy"] for r in summary["runs"]],
            "mean": summary["final_accuracy_mean"],
            "std": summary["final_accuracy_std"],
            "wall_s": [r["wall_s"] for r in summary["runs"]],
        }
        print(f"main job, {name}: {results[name]}", flush=True)
    return results


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=6, help="Per timed run (default 6).")
    parser.add_argument("--repeats", type=int, default=1, help="Timed runs per loop (default 1).")
    parser.add_argument(
        "--episodes",
        type=int,
        default=None,
        help="Episodes per iteration of the timed runs (default: the preset's).",
    )
    parser.add_argument("--algorithms", nargs="+", default=list(ALGORITHMS), choices=ALGORITHMS)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--skip-timing", action="store_true")
    parser.add_argument("--skip-accuracy", action="store_true")
    parser.add_argument("--output-dir", default="runs/async", help="The accuracy runs' folder.")
    parser.add_argument("--smoke", action="store_true", help="Tiny budgets, built-in model only.")
    parser.add_argument("--json", default=None, help="Write the results here.")
    args = parser.parse_args(argv)
    if args.iterations < 2:
        parser.error("--iterations must be >= 2: the first iteration is reported apart.")

    import torch

    torch.set_num_threads(1)
    from runner import run_info

    results: dict[str, Any] = {
        "run_info": run_info([ENV], argv=list(sys.argv[1:] if argv is None else argv)),
    }
    if not args.skip_timing:
        results["timing"] = timing(args)
    if not args.skip_accuracy:
        results["accuracy"] = accuracy(args)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return results


if __name__ == "__main__":  # the rollout worker is spawned: it imports this module again
    main()
