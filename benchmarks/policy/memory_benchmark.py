"""Memory benchmark: what each added agent costs on one shared ~100M-parameter base model.

For 1, 2, 4 and 8 agents (one LoRA adapter each on one base, the default policy configuration),
a fresh subprocess loads a :class:`~marft_algos.policy.MultiAgentPolicy`, lets every agent generate
a batch and takes one training forward/backward per agent (so activations, gradients and the KV
cache are included), then reports:

- parameter + buffer bytes of the model (each tensor counted once);
- peak resident set size of the process (``ru_maxrss``);
- LoRA parameter count.

Each agent's added cost is reported as a percentage of the single-agent figure; the target is
< 5% per added agent. Separate subprocesses keep each peak clean.

Run::

    python benchmarks/policy/memory_benchmark.py            # ~100M base, 1/2/4/8 agents
    python benchmarks/policy/memory_benchmark.py --quick    # tiny base, for a smoke test
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import torch

#: ~104M parameters: Qwen2 layout, 11 layers of width 768 (MLP 3072); the vocabulary is the tiny
#: local tokenizer's, so nearly all parameters sit in the transformer blocks, as in real models.
BASE_SETTINGS = {
    "hidden_size": 768,
    "num_layers": 11,
    "num_heads": 12,
    "intermediate_size": 3072,
    "seed": 0,
}
QUICK_SETTINGS = {"hidden_size": 64, "num_layers": 2, "num_heads": 4, "seed": 0}

PROMPTS = [
    [
        {"role": "system", "content": "You are agent number one."},
        {"role": "user", "content": "What is 12 + 35?"},
    ],
    [{"role": "user", "content": "Compute \\frac{1}{2} + \\frac{1}{3} and box the answer."}],
    [{"role": "user", "content": "Solve 2x + 3 = 11."}],
    [{"role": "user", "content": "7 * 8 = ?"}],
]


def _tensor_bytes(model: torch.nn.Module) -> int:
    seen: set[int] = set()
    total = 0
    for t in list(model.parameters()) + list(model.buffers()):
        if t.data_ptr() in seen:
            continue
        seen.add(t.data_ptr())
        total += t.numel() * t.element_size()
    return total


def _current_rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def _peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _release_free_heap() -> None:
    """Hand freed heap back to the OS (glibc keeps it otherwise; see RESULTS.md)."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def measure(model_path: str, n_agents: int, max_new_tokens: int, trim: bool) -> dict:
    """Run in a fresh process: load, act and train once per agent, report memory."""
    from marft_algos.policy import MultiAgentPolicy
    from marft_algos.protocols import GenerationSettings

    torch.manual_seed(0)
    agents = [f"agent{i}" for i in range(n_agents)]
    start = time.perf_counter()
    policy = MultiAgentPolicy.from_pretrained(model_path, agents, seed=0)
    for agent in agents:
        gens = policy.generate(
            agent, PROMPTS, GenerationSettings(max_new_tokens=max_new_tokens, seed=0)
        )
        logp = policy.token_log_probs(
            agent, [g.prompt_ids for g in gens], [g.action_ids for g in gens]
        ).log_probs
        (-logp.sum()).backward()
        # What an optimizer step + zero_grad(set_to_none=True) leaves behind.
        for p in policy.trainable_parameters(agent):
            p.grad = None
        del gens, logp
        if trim:
            _release_free_heap()
    model = policy.model(agents[0])
    lora = sum(p.numel() for p in policy.parameters())
    base = sum(p.numel() for n, p in model.named_parameters() if "lora_" not in n)
    return {
        "agents": n_agents,
        "base_params": base,
        "lora_params": lora,
        "tensor_bytes": _tensor_bytes(model),
        "peak_rss_bytes": _peak_rss(),
        "held_rss_bytes": _current_rss(),
        "seconds": time.perf_counter() - start,
    }


def _child(args: argparse.Namespace) -> None:
    print(json.dumps(measure(args.model, args.child, args.max_new_tokens, not args.no_trim)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--quick", action="store_true", help="tiny base model (smoke test)")
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--model", help="use this model instead of building one")
    parser.add_argument(
        "--no-trim",
        action="store_true",
        help="do not return freed heap to the OS between agents (shows allocator growth)",
    )
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    if args.child is not None:
        _child(args)
        return

    from marft_algos.policy.tiny import tiny_model_path

    # Built once and cached (see tiny_model_path); ~400 MiB on disk for the ~100M base.
    model = args.model or str(tiny_model_path(**(QUICK_SETTINGS if args.quick else BASE_SETTINGS)))
    rows = []
    for n in args.agents:
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "--child",
                str(n),
                "--model",
                model,
                "--max-new-tokens",
                str(args.max_new_tokens),
                *(["--no-trim"] if args.no_trim else []),
            ],
            check=True,
            capture_output=True,
            text=True,
        )
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))

    one = rows[0]
    mib = 1024**2
    print(
        f"base model: {one['base_params'] / 1e6:.1f}M parameters, float32, torch {torch.__version__}, "
        f"heap trimmed between agents: {not args.no_trim}"
    )
    print(
        f"{'agents':>6} {'LoRA params':>12} {'param+buffer MiB':>17} {'held RSS MiB':>13} "
        f"{'peak RSS MiB':>13}   cost per added agent (% of 1 agent): tensors / held RSS / peak RSS"
    )
    for row in rows:
        extra = row["agents"] - one["agents"]
        pct = []
        for key in ("tensor_bytes", "held_rss_bytes", "peak_rss_bytes"):
            pct.append(f"{100 * (row[key] - one[key]) / extra / one[key]:.2f}%" if extra else "-")
        print(
            f"{row['agents']:>6} {row['lora_params']:>12,} {row['tensor_bytes'] / mib:>17.1f} "
            f"{row['held_rss_bytes'] / mib:>13.1f} {row['peak_rss_bytes'] / mib:>13.1f}   "
            + " / ".join(pct)
        )
    per_adapter = one["lora_params"] / one["base_params"]
    print(
        f"one adapter = {100 * per_adapter:.2f}% of the base parameters; with its gradients and Adam "
        f"moments while training: {400 * per_adapter:.2f}%"
    )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
