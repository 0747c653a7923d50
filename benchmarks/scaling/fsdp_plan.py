"""Per-process memory of ``--fsdp``'s sharding plan: measured bytes against docs/scaling.md's formula.

Each model shape is built on the meta device (no weights: a 70B shape costs nothing), gets one
LoRA adapter per agent as ``marft train`` makes them (rank 8, every linear layer), and is sharded
by :func:`marft_algos.trainers.sharding.shard_models` over N gloo processes on this machine. Each
rank reports the bytes it stores (its shards of the base, its whole adapters) and the largest
units it gathers; rank 0 compares them with the formula

    stored per rank  = layers_bytes / N  (+ FSDP's dim-0 padding)
                       + embeddings + final norm + untied output layer (whole on every rank)
                       + agents x adapter_bytes (float32, whole)
    peak while training ~ stored + 1 decoder layer gathered (each layer is its own unit)

and writes ``benchmarks/scaling/fsdp_plan.json``. Shapes: SmolLM2-135M, Qwen2.5-1.5B, Qwen2.5-7B,
Llama-3-70B (bfloat16, their published configs' sizes).

    python benchmarks/scaling/fsdp_plan.py                 # N = 2, 4, 8
    python benchmarks/scaling/fsdp_plan.py --procs 8 --shapes llama-3-70b
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: name -> (hidden, intermediate, layers, heads, kv heads, vocab, tied embeddings)
SHAPES = {
    "smollm2-135m": (576, 1536, 30, 9, 3, 49152, True),
    "qwen2.5-1.5b": (1536, 8960, 28, 12, 2, 151936, True),
    "qwen2.5-7b": (3584, 18944, 28, 28, 4, 152064, False),
    "llama-3-70b": (8192, 28672, 80, 64, 8, 128256, False),
}
AGENTS = 2
GIB = 2**30


def build(shape: str):
    import torch
    from peft import get_peft_model
    from transformers import AutoModelForCausalLM, LlamaConfig

    from marft_algos.policy.config import LoraSettings

    hidden, inter, layers, heads, kv, vocab, tied = SHAPES[shape]
    config = LlamaConfig(
        hidden_size=hidden,
        intermediate_size=inter,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        vocab_size=vocab,
        tie_word_embeddings=tied,
    )
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
        model.requires_grad_(False)
        lora = LoraSettings().to_peft()
        model = get_peft_model(model, lora, adapter_name="agent0")
        for k in range(1, AGENTS):
            model.add_adapter(f"agent{k}", lora)
    return model


def nbytes(t) -> int:
    local = t.to_local() if hasattr(t, "to_local") else t
    return local.numel() * local.element_size()


def worker(shapes: list[str], out: Path) -> None:
    import torch

    from marft_algos.distributed import init_distributed
    from marft_algos.policy.forward import unwrap_causal_lm
    from marft_algos.trainers.sharding import shard_models

    dist = init_distributed("cpu")
    rows = []
    for shape in shapes:
        model = build(shape)
        named = list(model.named_parameters())
        base = sum(p.numel() * p.element_size() for n, p in named if "lora_" not in n)
        adapters = sum(p.numel() * 4 for n, p in named if "lora_" in n)  # float32 when trained
        lm = unwrap_causal_lm(model)
        layers = [
            sum(nbytes(p) for n, p in layer.named_parameters() if "lora_" not in n)
            for layer in lm.model.layers
        ]
        whole = base - sum(layers)  # embeddings, final norm, untied output layer
        shard_models([model], dist)
        stored_base = sum(nbytes(p) for n, p in model.named_parameters() if "lora_" not in n)
        stored = dist.max([float(stored_base)])[0]
        formula = sum(layers) / dist.world_size + whole
        rows.append(
            {
                "shape": shape,
                "processes": dist.world_size,
                "parameters_b": round(
                    sum(p.numel() for n, p in named if "lora_" not in n) / 1e9, 3
                ),
                "base_gib": base / GIB,
                "adapters_gib_fp32": adapters / GIB,
                "whole_on_every_rank_gib": whole / GIB,
                "stored_base_per_rank_gib": stored / GIB,
                "formula_base_per_rank_gib": formula / GIB,
                "stored_over_formula": stored / formula,
                "stored_per_rank_gib": (stored + adapters) / GIB,
                "peak_params_per_rank_gib": (stored + adapters + max(layers)) / GIB,
                "unsharded_per_rank_gib": (base + adapters) / GIB,
            }
        )
        del model
        torch.distributed.barrier()
    if dist.is_main:
        out.write_text(json.dumps(rows, indent=1) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--procs", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument("--json", type=Path, default=HERE / "fsdp_plan.json")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        worker(args.shapes, args.worker)
        return
    rows = []
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MASTER_ADDR": "127.0.0.1"}
    for n in args.procs:
        part = args.json.with_suffix(f".{n}.tmp")
        launch = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
        command = [*launch, "--nproc_per_node", str(n), __file__, "--worker", str(part)]
        subprocess.run([*command, "--shapes", *args.shapes], env=env, check=True)
        rows += json.loads(part.read_text())
        part.unlink()
    args.json.write_text(json.dumps(rows, indent=1) + "\n")
    print(
        f"{'shape':14} {'N':>2} {'whole GiB':>9} {'stored/rank':>11} {'formula':>8} "
        f"{'peak params':>11}"
    )
    for r in rows:
        print(
            f"{r['shape']:14} {r['processes']:>2} {r['unsharded_per_rank_gib']:>9.3f} "
            f"{r['stored_per_rank_gib']:>11.3f} "
            f"{r['formula_base_per_rank_gib'] + r['adapters_gib_fp32']:>8.3f} "
            f"{r['peak_params_per_rank_gib']:>11.3f}"
        )


if __name__ == "__main__":
    main()
