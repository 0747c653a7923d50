"""Rollouts on transformers vs vLLM: tokens per second and whole-iteration time, back to back.

Same model (SmolLM2-135M-Instruct, float32), same team (math-dual-v7's reasoner and actor, each with
its own LoRA adapter, moved off zero so LoRA does real work), same prompts and sampling settings.

- **Rollout**: for each agent, one batched call on ``--batch`` observations of math-dual-v7 with
  ``--max-new-tokens`` (sampled at T=1), as the rollout collector calls it. Tokens per second
  counts the action tokens returned. The two backends alternate (A B, then B A) ``--repeats`` times.
- **Iteration**: one GRPO iteration (``--episodes`` episodes, all generated together, groups of
  ``--num-generations``) on each backend, from the same initial policy: collect, update, and for
  vLLM the adapter sync and its probe. The engine's start-up is reported apart.

Runs in the vLLM environment (README: "Faster rollouts with vLLM")::

    OMP_NUM_THREADS=1 .venv-vllm/bin/python benchmarks/rollout_backends/compare.py \\
        --json benchmarks/rollout_backends/results.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
import transformers
import vllm

import marft_envs
from marft_algos.policy import MultiAgentPolicy
from marft_algos.protocols import GenerationSettings
from marft_algos.rollout.vllm import VLLMRolloutBackend, VLLMSettings
from marft_algos.trainers.grpo import GRPOConfig, GRPOTrainer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared runner
from runner import run_info

MODEL = "smollm2-135m-instruct"
ENV = "math-dual-v7"


def build_policy(agents: list[str]) -> MultiAgentPolicy:
    policy = MultiAgentPolicy.from_pretrained(MODEL, agents, seed=0)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for agent in agents:
            for p in policy.trainable_parameters(agent):
                p.add_(torch.randn(p.shape, generator=g) * 0.01)
    return policy


def observations(batch: int) -> list[Any]:
    env = marft_envs.make(ENV)
    out = []
    for seed in range(batch):
        env.reset(seed=seed)
        out.append(env.observe(env.agent_selection)["messages"])
    return out


def rollout(generator: Any, agents: list[str], messages: list[Any], tokens: int, seed: int) -> dict:
    start = time.perf_counter()
    produced = 0
    for i, agent in enumerate(agents):
        gens = generator.generate(
            agent, messages, GenerationSettings(max_new_tokens=tokens, seed=seed + i)
        )
        produced += sum(len(g.action_ids) for g in gens)
    seconds = time.perf_counter() - start
    return {"tokens": produced, "seconds": seconds, "tokens_per_s": produced / seconds}


def iteration(policy: MultiAgentPolicy, backend: Any, args: argparse.Namespace) -> dict:
    config = GRPOConfig(
        iterations=1,
        episodes_per_iteration=args.episodes,
        rollout_threads=args.episodes,
        num_generations=args.num_generations,
        max_new_tokens=args.iteration_tokens,
        seed=0,
        # Short answers rarely differ in reward within a group; the KL and entropy terms make the
        # update run all the same.
        beta=0.01,
        entropy_coef=0.01,
    )
    trainer = GRPOTrainer(policy, lambda: marft_envs.make(ENV), config, rollout_backend=backend)
    start = time.perf_counter()
    metrics = trainer.train_iteration()
    total = time.perf_counter() - start
    return {
        "seconds": total,
        "rollout_s": metrics["time/rollout_s"],
        "update_s": metrics["time/update_s"],
        "action_tokens_mean": metrics.get("rollout/action_tokens_mean"),
        "approx_kl": metrics.get("train/approx_kl"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--num-generations", type=int, default=4)
    parser.add_argument("--iteration-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    agents = list(marft_envs.make(ENV).possible_agents)
    messages = observations(args.batch)
    local = build_policy(agents)
    served = build_policy(agents)
    start = time.perf_counter()
    backend = VLLMRolloutBackend(served, VLLMSettings())
    startup = time.perf_counter() - start

    runs: dict[str, list[dict]] = {"transformers": [], "vllm": []}
    gens = {"transformers": local, "vllm": backend}
    for r in range(args.repeats):
        order = ["transformers", "vllm"] if r % 2 == 0 else ["vllm", "transformers"]
        for name in order:
            runs[name].append(rollout(gens[name], agents, messages, args.max_new_tokens, 100 * r))
            print(name, runs[name][-1], flush=True)
    speed = {n: statistics.median(x["tokens_per_s"] for x in v) for n, v in runs.items()}

    iterations = {
        "transformers": iteration(build_policy(agents), None, args),
        "vllm": iteration(served, backend, args),
    }
    print(iterations, flush=True)
    backend.close()

    result = {
        "model": MODEL,
        "env": ENV,
        "agents": agents,
        "batch": args.batch,
        "max_new_tokens": args.max_new_tokens,
        "threads": args.threads,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "vllm": vllm.__version__,
        "machine": platform.machine(),
        "run_info": run_info([ENV]),
        "engine_startup_s": startup,
        "rollout": runs,
        "rollout_tokens_per_s_median": speed,
        "rollout_speedup_vllm": speed["vllm"] / speed["transformers"],
        "iteration": iterations,
        "iteration_speedup_vllm": iterations["transformers"]["seconds"]
        / iterations["vllm"]["seconds"],
    }
    print(
        json.dumps(
            {
                k: result[k]
                for k in (
                    "rollout_tokens_per_s_median",
                    "rollout_speedup_vllm",
                    "iteration_speedup_vllm",
                    "engine_startup_s",
                )
            },
            indent=2,
        )
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
