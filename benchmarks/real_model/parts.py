"""What each rollout/update speed-up buys on SmolLM2-135M-Instruct, each switched off in turn.

One process, one torch thread, alternating the two variants of each part ``--repeats`` times and
reporting medians:

- **sampling**: one draw per row from ``softmax`` of ``16 x 49,152`` logits, ``torch.multinomial``
  against marft's inverse-CDF draw (``sample_categorical``);
- **prefill**: a GRPO batch's prompts (4 distinct x 4 rows) run as 16 padded rows against each
  distinct prompt once, unpadded, with its cache copied to its rows;
- **merged adapter**: ``generate`` with the LoRA adapter folded into the weights against through
  peft's LoRA layers (``merge_adapters_for_generation``);
- **KV cache**: ``generate`` with the in-place ``GrowingLayer`` cache against transformers'
  ``DynamicLayer`` (``torch.cat`` every step);
- **shared prompts in the update**: forward + backward of the batch with each distinct prompt run
  once against every row's padded prompt (``share_prompts_in_update``);
- **entropy**: forward + backward with the logged entropy computed without autograd against
  with autograd (what ``entropy_coef=0`` used to cost).

    python benchmarks/real_model/parts.py --json benchmarks/real_model/parts.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import marft_envs
from marft_algos.policy import MultiAgentPolicy, kv_cache
from marft_algos.policy.decoding import sample_categorical
from marft_algos.policy.forward import left_pad
from marft_algos.policy.kv_cache import left_padded_cache, prompt_caches
from marft_algos.protocols import GenerationSettings
from marft_envs.math.data import load_dataset

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared runner
from runner import find_data_file, run_info

#: In $MARFT_DATA (docs/benchmarks.md, "Data files"); without it the built-in problems.
GSM8K = "gsm8k_test.jsonl"


def alternate(variants: dict[str, Callable[[], Any]], repeats: int) -> dict[str, float]:
    """Median seconds of each variant, run in alternating order."""
    times: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for r in range(repeats):
        for name in names if r % 2 == 0 else names[::-1]:
            start = time.perf_counter()
            variants[name]()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--num-generations", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    torch.set_num_threads(1)

    policy = MultiAgentPolicy.from_pretrained(args.model, ["actor"], seed=0)
    backbone = policy.backbone("actor")
    with torch.no_grad():
        gen = torch.Generator().manual_seed(0)
        for name, p in backbone.named_adapter_parameters("actor"):
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.01)
    gsm8k = find_data_file(GSM8K)
    data = load_dataset(str(gsm8k) if gsm8k is not None else "builtin:test")
    env = marft_envs.make("math-single-v1", dataset=data)
    distinct = []
    for i in range(args.prompts):
        env.reset(seed=i, options={"index": i})
        distinct.append(policy.render("actor", env.observe("actor")))
    prompts = [p for p in distinct for _ in range(args.num_generations)]
    rows = len(prompts)
    n = args.max_new_tokens
    results: dict[str, Any] = {"rows": rows, "max_new_tokens": n}

    logits = torch.randn(rows, len(backbone.tokenizer))
    probs = torch.softmax(logits, -1)

    def multinomial() -> None:
        for _ in range(20):
            torch.multinomial(probs, 1)

    def inverse_cdf() -> None:
        for _ in range(20):
            sample_categorical(probs, torch.rand(rows))

    sampling = alternate({"multinomial": multinomial, "inverse_cdf": inverse_cdf}, args.repeats)
    results["sampling_ms_per_step"] = {k: 1000 * v / 20 for k, v in sampling.items()}

    model = backbone.model
    index = torch.arange(args.prompts).repeat_interleave(args.num_generations)

    def padded_prefill() -> None:
        ids, mask = left_pad(prompts, backbone.pad_id, "cpu")
        with torch.no_grad(), policy.acting("actor"):
            model(
                input_ids=ids,
                attention_mask=mask,
                position_ids=(mask.cumsum(-1) - 1).clamp_min(0),
                use_cache=True,
                logits_to_keep=1,
            )

    def distinct_prefill() -> None:
        with torch.no_grad(), policy.acting("actor"):
            caches = prompt_caches(model, distinct).caches
            left_padded_cache(caches, index, max(len(p) for p in distinct), growing=True)

    results["prefill_s"] = alternate(
        {"padded_rows": padded_prefill, "distinct_once": distinct_prefill}, args.repeats
    )

    def generate() -> None:
        policy.generate_from_ids("actor", prompts, GenerationSettings(max_new_tokens=n, seed=1))

    eos = backbone.eos_ids
    backbone.eos_ids = []  # every row runs to the cap: equal work in every variant
    try:

        def unmerged() -> None:
            policy.merge_adapters_for_generation = False
            try:
                generate()
            finally:
                policy.merge_adapters_for_generation = True

        results["generate_merged_s"] = alternate(
            {"merged": generate, "unmerged": unmerged}, args.repeats
        )
        growing = kv_cache.GrowingLayer

        def concatenating() -> None:
            kv_cache.GrowingLayer = kv_cache.DynamicLayer  # type: ignore[misc]
            try:
                generate()
            finally:
                kv_cache.GrowingLayer = growing  # type: ignore[misc]

        results["generate_cache_s"] = alternate(
            {"in_place": generate, "torch_cat": concatenating}, args.repeats
        )
        gens = policy.generate_from_ids(
            "actor", prompts, GenerationSettings(max_new_tokens=n, seed=2)
        )
    finally:
        backbone.eos_ids = eos

    def update(share: bool, differentiable: bool) -> Callable[[], None]:
        def run() -> None:
            policy.share_prompts_in_update = share
            out = policy.token_log_probs(
                "actor",
                [g.prompt_ids for g in gens],
                [g.action_ids for g in gens],
                with_entropy=True,
                differentiable_entropy=differentiable,
            )
            out.log_probs.sum().backward()
            for p in policy.trainable_parameters("actor"):
                p.grad = None
            policy.share_prompts_in_update = True

        return run

    results["update_shared_prompts_s"] = alternate(
        {"shared": update(True, False), "padded_rows": update(False, False)}, args.repeats
    )
    results["update_entropy_s"] = alternate(
        {"no_autograd": update(True, False), "autograd": update(True, True)}, args.repeats
    )
    print(json.dumps(results, indent=2))
    if args.json:
        args.json.write_text(json.dumps({**results, "run_info": run_info()}, indent=2))


if __name__ == "__main__":
    main()
