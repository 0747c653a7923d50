"""Bytes the update keeps for its backward pass per token, for real model shapes, without a GPU.

Builds Qwen2.5-1.5B- and 7B-shaped models (random weights, bfloat16) on the meta device with
marft's default LoRA adapter (r=8, every linear layer), runs the update's forward (logits of
every position, then :func:`~marft_algos.policy.forward.log_probs_and_entropy` with an entropy
term) under saved-tensor hooks, and divides the bytes autograd keeps by the tokens, with and
without :func:`~marft_algos.policy.checkpointing.checkpointed_layers`. Nothing is allocated, so it runs
in seconds on a laptop. ``docs/gpu.md`` turns these numbers into memory per model size.

Run::

    python benchmarks/gpu/update_memory.py --json benchmarks/gpu/update_memory.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runner import run_info

from marft_algos.policy.checkpointing import checkpointed_layers
from marft_algos.policy.config import LoraSettings
from marft_algos.policy.forward import log_probs_and_entropy

#: Shapes of the Qwen2.5 instruct models (config.json on the Hub).
SHAPES: dict[str, dict[str, Any]] = {
    "Qwen2.5-1.5B": {
        "hidden_size": 1536,
        "intermediate_size": 8960,
        "num_hidden_layers": 28,
        "num_attention_heads": 12,
        "num_key_value_heads": 2,
        "vocab_size": 151936,
        "tie_word_embeddings": True,
    },
    "Qwen2.5-7B": {
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "vocab_size": 152064,
        "tie_word_embeddings": False,
    },
}


def saved_bytes(fn: Any, resident: Any = ()) -> int:
    """Bytes of the tensors autograd saves while ``fn`` runs (each storage once), leaving out
    the ``resident`` tensors (the model's weights, which a matmul saves by reference)."""
    skip = {t.untyped_storage()._cdata for t in resident}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        key = t.untyped_storage()._cdata
        if key not in skip:
            seen[key] = max(seen.get(key, 0), t.numel() * t.element_size())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(seen.values())


def measure(shape: dict[str, Any], rows: int, tokens: int) -> dict[str, Any]:
    import transformers.masking_utils as masking
    from peft import get_peft_model
    from transformers import Qwen2Config, Qwen2ForCausalLM

    # Its packed-sequence check reads a value from the device, which a meta tensor has not.
    masking.find_packed_sequence_indices = lambda *args, **kwargs: None
    with torch.device("meta"):
        model = Qwen2ForCausalLM(Qwen2Config(**shape)).to(torch.bfloat16)
        model = get_peft_model(model, LoraSettings().to_peft())
    model.eval()
    ids = torch.zeros(rows, tokens, dtype=torch.long, device="meta")
    mask = torch.ones(rows, tokens, dtype=torch.bool, device="meta")
    out: dict[str, Any] = {
        "base_parameters": sum(p.numel() for n, p in model.named_parameters() if "lora_" not in n),
        "lora_parameters": sum(p.numel() for n, p in model.named_parameters() if "lora_" in n),
    }
    for checkpointing in (False, True):

        def run(checkpointing: bool = checkpointing) -> None:
            with checkpointed_layers(model, checkpointing):
                logits = model(input_ids=ids, use_cache=False).logits
            log_probs_and_entropy(logits, ids, mask, with_entropy=True)

        key = "saved_bytes_per_token" + ("_checkpointed" if checkpointing else "")
        out[key] = saved_bytes(run, list(model.parameters())) / (rows * tokens)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    results = {name: measure(shape, args.rows, args.tokens) for name, shape in SHAPES.items()}
    out = {"rows": args.rows, "tokens": args.tokens, "results": results, "run_info": run_info()}
    text = json.dumps(out, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")


if __name__ == "__main__":
    main()
