"""Rollout speed: 16 prompts in one batched ``generate`` call vs. 16 calls of one prompt.

Both modes go through :meth:`MultiAgentPolicy.generate` (so the post-generation log-prob pass is
included) on the tiny local model, alternating in the same process so that machine load affects
them alike. Tokens per second counts the action tokens actually returned. The target is a batched
speed-up of at least 5x.

Run::

    python benchmarks/policy/rollout_speed.py
    python benchmarks/policy/rollout_speed.py --max-new-tokens 128 --repeats 5
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from marft_algos.policy import MultiAgentPolicy, tiny_model_path
from marft_algos.protocols import GenerationSettings

PROBLEMS = [
    "What is 12 + 35?",
    "Compute 7 \\times 8.",
    "Solve 2x + 3 = 11 for x.",
    "Simplify \\frac{6}{8}.",
    "What is 100 - 37?",
    "A train travels 60 miles in 2 hours. What is its speed?",
    "Compute \\frac{1}{2} + \\frac{1}{3}.",
    "What is 9^2?",
    "What is \\sqrt{144}?",
    "Add 123 and 456.",
    "What is 15% of 200?",
    "Solve x^2 = 49 for positive x.",
    "What is 3 \\cdot 4 + 5?",
    "How many minutes are in 3 hours?",
    "What is 1000 / 8?",
    "Round 3.14159 to two decimals.",
]


def _run(
    policy: MultiAgentPolicy, batches: list[list], max_new_tokens: int, seed: int
) -> tuple[int, float]:
    start = time.perf_counter()
    tokens = 0
    for i, batch in enumerate(batches):
        gens = policy.generate(
            "actor", batch, GenerationSettings(max_new_tokens=max_new_tokens, seed=seed + i)
        )
        tokens += sum(len(g.action_ids) for g in gens)
    return tokens, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    policy = MultiAgentPolicy.from_pretrained(str(tiny_model_path()), ["actor"], seed=0)
    observations = [
        [
            {"role": "system", "content": "You are the actor. Answer in \\boxed{}."},
            {"role": "user", "content": p},
        ]
        for p in PROBLEMS
    ]
    batched = [observations]
    single = [[obs] for obs in observations]
    _run(policy, batched, 4, 0)  # warm-up
    _run(policy, single[:2], 4, 0)

    rates = {"batched": [], "single": []}
    for r in range(args.repeats):
        for name, batches in (("batched", batched), ("single", single)):
            tokens, seconds = _run(policy, batches, args.max_new_tokens, seed=1000 * r)
            rates[name].append(tokens / seconds)
    b, s = statistics.median(rates["batched"]), statistics.median(rates["single"])
    print(
        f"tiny Qwen2 ({sum(p.numel() for p in policy.model('actor').parameters()) / 1e6:.2f}M params), "
        f"16 prompts, max_new_tokens={args.max_new_tokens}, torch threads={args.threads}, "
        f"median of {args.repeats}"
    )
    print(f"batched (1 call x 16 prompts): {b:8.1f} tokens/s")
    print(f"single  (16 calls x 1 prompt): {s:8.1f} tokens/s")
    print(f"speed-up: {b / s:.1f}x")


if __name__ == "__main__":
    main()
