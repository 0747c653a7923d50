"""How far two correct 16-bit computations of the same log-probs lie apart: the adapter-sync
probe's tolerance (:class:`~marft_algos.rollout.vllm.VLLMSettings`) must sit above this.

The probe samples ``PROBE_TOKENS`` tokens for each of the two probe prompts on the engine and takes
the largest absolute difference to the policy's log-probs. Without a GPU (and so without vLLM's
GPU kernels) the same statistic is measured here between two transformers attention kernels
(SDPA and eager) in bfloat16, and between bfloat16 and float32, on CPU: for many pairs of prompts,
the policy samples in bfloat16 (SDPA) with a trained-looking adapter, the other computation
recomputes the log-probs, and the largest difference per pair is one probe's result. For scale, the
same statistic against the base model without the adapter (a sync that failed to load it) shows
what the probe must still catch. The same script runs on a GPU unchanged (``--device cuda``).

Run::

    python benchmarks/gpu/probe_tolerance.py --json benchmarks/gpu/probe_tolerance_cpu.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runner import run_info

from marft_algos.policy import MultiAgentPolicy
from marft_algos.protocols import GenerationSettings

PROBE_TOKENS = 8
REFERENCE = "bf16_sdpa_adapter_missing"
QUESTIONS = [
    "What is {a} + {b}? Explain briefly.",
    "Name three prime numbers above {a} and say why they are prime.",
    "A train covers {a} km in {b} minutes. What is its speed in km/h?",
    "Solve for x: {a}x + {b} = 0.",
    "Write one sentence about the number {a}.",
    "Is {a} divisible by {b}? Answer and explain.",
]


def messages(i: int) -> list[dict[str, str]]:
    q = QUESTIONS[i % len(QUESTIONS)].format(a=7 + 13 * i, b=3 + (i % 11))
    return [{"role": "user", "content": q}]


def nudge(policy: MultiAgentPolicy, scale: float, seed: int) -> None:
    """Move every LoRA B off zero, as training does, so the probe sees the adapter."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in policy.trainable_parameters("agent"):
            if p.dim() == 2 and p.shape[1] < p.shape[0]:  # lora_B: (out, r)
                p.add_(torch.randn(p.shape, generator=gen).to(p.dtype) * scale)


def load(model: str, dtype: torch.dtype, attn: str, device: str) -> MultiAgentPolicy:
    policy = MultiAgentPolicy.from_pretrained(
        model,
        ["agent"],
        seed=0,
        torch_dtype=dtype,
        device=device,
        model_kwargs={"attn_implementation": attn},
    )
    nudge(policy, 0.02, seed=1)
    return policy


def quantiles(values: list[float]) -> dict[str, float]:
    t = torch.tensor(values, dtype=torch.float64)
    qs = {"median": 0.5, "p90": 0.9, "p99": 0.99}
    out = {k: float(t.quantile(q)) for k, q in qs.items()}
    out["max"] = float(t.max())
    return out


def measure(model: str, probes: int, device: str) -> dict[str, object]:
    sampler = load(model, torch.bfloat16, "sdpa", device)
    others = {
        "bf16_sdpa_recomputed": sampler,
        "bf16_eager": load(model, torch.bfloat16, "eager", device),
        "fp32_sdpa": load(model, torch.float32, "sdpa", device),
        # What the probe must still catch: an engine serving the base model without the adapter.
        REFERENCE: sampler,
    }
    per_probe: dict[str, list[float]] = {k: [] for k in others}
    per_token: dict[str, list[float]] = {k: [] for k in others}
    start = time.perf_counter()
    for i in range(probes):
        obs = [messages(2 * i), messages(2 * i + 1)]
        gens = sampler.generate(
            "agent", obs, GenerationSettings(max_new_tokens=PROBE_TOKENS, seed=i)
        )
        for name, other in others.items():
            with torch.no_grad():
                lp = other.token_log_probs(
                    "agent",
                    [g.prompt_ids for g in gens],
                    [g.action_ids for g in gens],
                    reference=name == REFERENCE,
                )
            diffs = [
                (lp.log_probs[j, lp.mask[j]].double().cpu() - torch.tensor(g.log_probs)).abs()
                for j, g in enumerate(gens)
            ]
            flat = torch.cat(diffs)
            per_token[name] += flat.tolist()
            per_probe[name].append(float(flat.max()) if len(flat) else 0.0)
    return {
        "probes": probes,
        "tokens_per_probe": 2 * PROBE_TOKENS,
        "seconds": round(time.perf_counter() - start, 1),
        "largest_gap_per_probe": {k: quantiles(v) for k, v in per_probe.items()},
        "gap_per_token": {k: quantiles(v) for k, v in per_token.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["marft-tiny-math", "smollm2-135m-instruct"])
    parser.add_argument("--probes", type=int, default=50)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    results = {m: measure(m, args.probes, args.device) for m in args.models}
    out = {"results": results, "run_info": run_info(device=args.device)}
    text = json.dumps(out, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")


if __name__ == "__main__":
    main()
