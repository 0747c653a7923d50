"""How far the rollout's log-probs are from the update's recomputation at the same weights
(``rollout/logprob_mismatch_*``, docs/maths.md "Engine mismatch"), float32 against bfloat16.

Rollouts decode with a KV cache, one token at a time; the update recomputes every token in one
forward. In float32 the two agree to round-off; in 16 bits they round differently, which is why
``engine_correction="auto"`` turns the correction on for 16-bit base models.

    OMP_NUM_THREADS=1 python benchmarks/exactness/engine_mismatch.py [--model marft-tiny-math]
"""

from __future__ import annotations

import argparse
import json
import time

import torch

import marft_envs
from marft_algos.policy import MultiAgentPolicy
from marft_algos.trainers.grpo import GRPOConfig, GRPOTrainer
from marft_algos.trainers.proximal import attach_proximal, logprob_mismatch


def measure(model: str, dtype: torch.dtype, episodes: int, tokens: int) -> dict:
    env_fn = lambda: marft_envs.make("math-dual-v7")  # noqa: E731
    agents = env_fn().possible_agents
    policy = MultiAgentPolicy.from_pretrained(model, agents, seed=0, torch_dtype=dtype)
    config = GRPOConfig(
        episodes_per_iteration=episodes,
        num_generations=4,
        rollout_threads=4,
        max_new_tokens=tokens,
        temperature=0.7,
        top_p=0.9,
        engine_correction="on",
    )
    trainer = GRPOTrainer(policy, env_fn, config)
    start = time.perf_counter()
    decisions = [d for e in trainer.collect() for d in e.decisions]
    recomputed = attach_proximal(trainer, decisions, own_forward=False)
    assert recomputed is not None
    out = logprob_mismatch(decisions, recomputed, trainer.dist)
    pooled = {k: round(v, 5) for k, v in out.items() if k.count("/") == 1}
    tokens_seen = sum(len(d.action_ids) for d in decisions)
    return {
        "model": model,
        "dtype": str(dtype).removeprefix("torch."),
        "decisions": len(decisions),
        "tokens": tokens_seen,
        **pooled,
        "seconds": round(time.perf_counter() - start, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=32)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = [
        measure(args.model, dtype, args.episodes, args.tokens)
        for dtype in (torch.float32, torch.bfloat16)
    ]
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
