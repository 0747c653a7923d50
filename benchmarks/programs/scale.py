"""A 5-agent program at the CLI preset's 64 env copies: in process against the local endpoint,
each with the program in a thread and in its own process (``isolation``).

    python benchmarks/programs/scale.py --out benchmarks/programs/scale_builtin.json
    python benchmarks/programs/scale.py --model smollm2-135m-instruct --episodes 16 \
        --copies 16 --max-new-tokens 16 --out benchmarks/programs/scale_smollm2.json

The team is a production-style help desk: ``triage`` routes each request to ``billing``, ``tech``
or ``account``, whose answer ``qa`` reviews (3 calls per episode), rewarded for the right
department minus 0.05 per call. All settings run the same episodes with the same sampling seed,
so they generate the same tokens (checked: ``same_tokens``); they are measured back to back,
interleaved, ``--repeats`` times after a warm-up, and reported as episodes per second and the
ratio to the in-process thread setting of the same repeat. ``--train-iterations`` also times
whole GRPO iterations (rollout and update, from the same untuned adapters) per setting, as a
``marft train`` run spends them. One torch thread.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
from runner import run_info  # noqa: E402

from marft_algos import MultiAgentPolicy  # noqa: E402
from marft_algos.policy import tiny_model_path  # noqa: E402
from marft_algos.policy.pretrained import resolve_model  # noqa: E402
from marft_algos.rollout.collector import EpisodeRequest, GenerationSettings, RolloutCollector  # noqa: E402
from marft_envs.programs import ProgramEnv  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from desk_team import AGENTS, REQUESTS, help_desk  # noqa: E402


def measure(policy, transport: str, isolation: str, args) -> dict:
    def make_env():
        return ProgramEnv(
            help_desk, AGENTS, REQUESTS, transport=transport, isolation=isolation, split="all"
        )

    collector = RolloutCollector.from_factory(
        policy,
        make_env,
        args.copies,
        GenerationSettings(max_new_tokens=args.max_new_tokens),
        seed=0,
    )
    requests = [EpisodeRequest(seed=i, options={"index": i}) for i in range(args.episodes)]
    start = time.perf_counter()
    episodes = collector.collect(requests)
    seconds = time.perf_counter() - start
    collector.close()
    failed = sum("program_error" in e.info for e in episodes)
    calls = sum(len(e.decisions) for e in episodes)
    tokens = [len(d.action_ids) for e in episodes for d in e.decisions]
    return {
        "seconds": seconds,
        "episodes_per_s": len(episodes) / seconds,
        "calls": calls,
        "failed": failed,
        "tokens": sum(tokens),
    }


def measure_training(model: str, transport: str, isolation: str, args) -> dict:
    """Whole GRPO iterations (rollout and update) from the same untuned adapters."""
    from marft_algos import GRPOConfig, GRPOTrainer

    policy = MultiAgentPolicy.from_pretrained(model, AGENTS, seed=0)

    def make_env():
        return ProgramEnv(
            help_desk, AGENTS, REQUESTS, transport=transport, isolation=isolation, split="all"
        )

    config = GRPOConfig(
        iterations=args.train_iterations,
        episodes_per_iteration=args.episodes,
        rollout_threads=args.copies,
        max_new_tokens=args.max_new_tokens,
        num_generations=4,
        seed=0,
    )
    trainer = GRPOTrainer(policy, make_env, config)
    start = time.perf_counter()
    records = trainer.train()
    seconds = time.perf_counter() - start
    trainer.close()
    return {
        "seconds": seconds,
        "rollout_s": sum(r["time/rollout_s"] for r in records),
        "update_s": sum(r["time/update_s"] for r in records),
        "program_errors": sum(r.get("rollout/program_errors", 0) for r in records),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="model name or path (default: built-in)")
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--copies", type=int, default=64, help="env copies stepped together")
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--train-iterations",
        type=int,
        default=2,
        help="also time this many GRPO iterations per setting (0: rollouts only)",
    )
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    model = resolve_model(args.model) if args.model else str(tiny_model_path())
    policy = MultiAgentPolicy.from_pretrained(model, AGENTS, seed=0)
    settings = [
        ("inprocess", "thread"),
        ("inprocess", "process"),
        ("http", "thread"),
        ("http", "process"),
    ]
    measure(policy, "http", "process", argparse.Namespace(**{**vars(args), "episodes": 8}))
    runs: dict[str, list[dict]] = {f"{t}/{i}": [] for t, i in settings}
    for _ in range(args.repeats):
        for transport, isolation in settings:
            runs[f"{transport}/{isolation}"].append(measure(policy, transport, isolation, args))
    training: dict[str, list[dict]] = {f"{t}/{i}": [] for t, i in settings}
    for _ in range(args.repeats if args.train_iterations else 0):
        for transport, isolation in settings:
            training[f"{transport}/{isolation}"].append(
                measure_training(model, transport, isolation, args)
            )
    base = runs["inprocess/thread"]
    ratios = {}
    for name, rs in runs.items():
        per_repeat = [
            r["episodes_per_s"] / b["episodes_per_s"] for r, b in zip(rs, base, strict=True)
        ]
        ratios[name] = {"mean": statistics.mean(per_repeat), "per_repeat": per_repeat}
    calls = sum(r["calls"] for r in base)
    extra_ms_per_call = {
        name: 1000 * (sum(r["seconds"] for r in rs) - sum(b["seconds"] for b in base)) / calls
        for name, rs in runs.items()
    }
    result = {
        "model": args.model or "marft-tiny-math",
        "agents": AGENTS,
        "episodes": args.episodes,
        "copies": args.copies,
        "max_new_tokens": args.max_new_tokens,
        "repeats": args.repeats,
        "same_tokens": len({r["tokens"] for rs in runs.values() for r in rs}) == 1,
        "failed_episodes": {n: [r["failed"] for r in rs] for n, rs in runs.items()},
        "seconds": {n: [round(r["seconds"], 3) for r in rs] for n, rs in runs.items()},
        "ratio_to_inprocess_thread": ratios,
        "extra_ms_per_call_vs_inprocess_thread": extra_ms_per_call,
        "training": {
            "iterations": args.train_iterations,
            "seconds": {n: [round(r["seconds"], 3) for r in rs] for n, rs in training.items()},
            "rollout_s": {n: [round(r["rollout_s"], 3) for r in rs] for n, rs in training.items()},
            "update_s": {n: [round(r["update_s"], 3) for r in rs] for n, rs in training.items()},
            "program_errors": {n: [r["program_errors"] for r in rs] for n, rs in training.items()},
            "ratio_to_inprocess_thread": {
                n: [
                    b["seconds"] / r["seconds"]
                    for r, b in zip(rs, training["inprocess/thread"], strict=True)
                ]
                for n, rs in training.items()
            },
        },
        "run_info": run_info([]),
    }
    print(json.dumps({k: v for k, v in result.items() if k != "run_info"}, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
