"""Rollout throughput of a team written as a program against the same team as a native env.

    python benchmarks/programs/throughput.py                       # built-in model
    python benchmarks/programs/throughput.py --model smollm2-135m-instruct --episodes 16

The team is the paper's reasoner -> actor: ``math-dual-v7`` (native ``FlexPOMDPEnv``) against
``program-math-dual-v0`` (``examples/program_team.py``: the same prompts as a plain function),
in process and over the local OpenAI-compatible endpoint (``transport="http"``). Same model, same
pinned problems, same sampling seed, so the same tokens are generated (the tests check the ids
are identical); the three are measured back to back, interleaved, ``--repeats`` times, and the
ratio of tokens per second to the native env's is reported with its spread. One torch thread.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
from runner import run_info  # noqa: E402

import marft_envs  # noqa: E402
from marft_algos import MultiAgentPolicy  # noqa: E402
from marft_algos.policy import tiny_model_path  # noqa: E402
from marft_algos.policy.pretrained import resolve_model  # noqa: E402
from marft_algos.rollout.collector import EpisodeRequest, GenerationSettings, RolloutCollector  # noqa: E402


def load_examples() -> object:
    spec = importlib.util.spec_from_file_location(
        "program_team", ROOT / "examples" / "program_team.py"
    )
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def measure(policy, make_env, episodes: int, threads: int, max_new_tokens: int) -> dict:
    collector = RolloutCollector.from_factory(
        policy, make_env, threads, GenerationSettings(max_new_tokens=max_new_tokens), seed=0
    )
    requests = [EpisodeRequest(seed=i, options={"index": i}) for i in range(episodes)]
    start = time.perf_counter()
    results = collector.collect(requests)
    seconds = time.perf_counter() - start
    for env in collector.envs:
        env.close()
    tokens = sum(len(d.action_ids) for e in results for d in e.decisions)
    return {"seconds": seconds, "tokens": tokens, "tokens_per_s": tokens / seconds}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model", default=None, help="model name or path (default: the built-in model)"
    )
    parser.add_argument("--episodes", type=int, default=32)
    parser.add_argument("--threads", type=int, default=8, help="env copies stepped together")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=None, help="results JSON (default: print only)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    load_examples()
    model = resolve_model(args.model) if args.model else str(tiny_model_path())
    policy = MultiAgentPolicy.from_pretrained(model, ["reasoner", "actor"], seed=0)
    marft_envs.register_program(
        "bench/program-math-dual-http-v0",
        marft_envs.spec("program-math-dual-v0").kwargs["program"],
        agents=marft_envs.spec("program-math-dual-v0").kwargs["agents"],
        tasks=marft_envs.spec("program-math-dual-v0").kwargs["tasks"],
        test_tasks=marft_envs.spec("program-math-dual-v0").kwargs["test_tasks"],
        transport="http",
    )
    settings = {
        "native": lambda: marft_envs.make("math-dual-v7"),
        "program": lambda: marft_envs.make("program-math-dual-v0"),
        "program_http": lambda: marft_envs.make("bench/program-math-dual-http-v0"),
    }
    measure(policy, settings["native"], args.threads, args.threads, args.max_new_tokens)  # warm-up
    runs: dict[str, list[dict]] = {name: [] for name in settings}
    for _ in range(args.repeats):
        for name, make_env in settings.items():
            runs[name].append(
                measure(policy, make_env, args.episodes, args.threads, args.max_new_tokens)
            )
    tokens = {name: {r["tokens"] for r in rs} for name, rs in runs.items()}
    ratios = {}
    for name in ("program", "program_http"):
        per_repeat = [
            p["tokens_per_s"] / n["tokens_per_s"]
            for p, n in zip(runs[name], runs["native"], strict=True)
        ]
        ratios[name] = {
            "mean": statistics.mean(per_repeat),
            "min": min(per_repeat),
            "max": max(per_repeat),
            "per_repeat": per_repeat,
        }
    result = {
        "model": args.model or "marft-tiny-math",
        "episodes": args.episodes,
        "threads": args.threads,
        "max_new_tokens": args.max_new_tokens,
        "repeats": args.repeats,
        "same_tokens": all(len(t) == 1 for t in tokens.values())
        and len({next(iter(t)) for t in tokens.values()}) == 1,
        "tokens_per_s": {n: [r["tokens_per_s"] for r in rs] for n, rs in runs.items()},
        "ratio_to_native": ratios,
        "run_info": run_info(["math-dual-v7", "program-math-dual-v0"]),
    }
    print(json.dumps({k: v for k, v in result.items() if k != "run_info"}, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
