"""``marft export``: each agent's adapter as a standard peft folder, optionally merged into its base.

Output layout (``--output-dir``, default ``<run>/export``)::

    marft_export.json         agents → base model (a portable id and how to get it), adapter
                              folder, merged folder; the run's env and generation settings
    <agent>/adapter/          adapter_config.json + adapter_model.safetensors (peft format;
                              ``PeftModel.from_pretrained(base, folder)`` loads it) and
                              base_model.json (the base's portable id and how to rebuild it)
    <agent>/merged/           with --merge: the base model with the adapter merged in, plus its
                              tokenizer (``AutoModelForCausalLM.from_pretrained`` loads it; serve
                              it with any engine), in the base's dtype or --merged-dtype

An export names no path of the machine it was made on: ``base_model_name_or_path`` is the base's
portable id (:func:`~marft_algos.policy.pretrained.portable_base`: a short name such as
``smollm2-135m-instruct``, a GGUF file name, a Hub id), never the local cache folder. Agents that
share an adapter get the same files; an agent acting with the plain base model has no adapter
folder (its merged folder is the base model itself).
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from marft_algos.cli.parsing import UsageError, parse_run_command

__all__ = ["ExportArguments", "export_checkpoint", "main"]


@dataclass
class ExportArguments:
    """Where and what to export."""

    output_dir: str | None = None
    """Export folder (default: export/ inside the run folder)."""
    merge: bool = False
    """Also write each agent's base model with its adapter merged in (a standalone model)."""
    overwrite: bool = False
    """Replace an existing export folder."""
    merged_dtype: Literal["base", "float32", "bfloat16", "float16"] = "base"
    """Weight dtype of merged models: the base model's own (its config's torch_dtype), or one named (bfloat16 halves float32's size)."""


def export_checkpoint(
    checkpoint: Path, output: Path, *, merge: bool = False, merged_dtype: str = "base"
) -> dict[str, Any]:
    """Write the export of ``checkpoint`` to ``output``; returns the index written as
    ``marft_export.json`` (see the module notes)."""
    from marft_algos.policy.pretrained import portable_base
    from marft_algos.runs.checkpoint import read_manifest

    manifest = read_manifest(checkpoint)
    output.mkdir(parents=True, exist_ok=True)
    run = dict(manifest.get("run") or {})
    if isinstance(run.get("model"), str):
        run["model"] = portable_base(run["model"])["id"]
    index: dict[str, Any] = {"checkpoint": checkpoint.name, "agents": {}, "run": run}
    for agent in manifest["agents"]:
        base = manifest["base_models"][agent]
        portable = portable_base(base)
        adapter = manifest["adapters"][agent]
        entry: dict[str, Any] = {
            "base_model": portable["id"],
            "base_model_source": portable,
            "adapter": None,
            "merged": None,
        }
        if adapter is not None:
            source = checkpoint / "adapters" / adapter
            target = output / agent / "adapter"
            shutil.copytree(source, target, dirs_exist_ok=True)
            config_file = target / "adapter_config.json"
            config = json.loads(config_file.read_text())
            # A path of this machine (the GGUF cache folder, say) resolves nowhere else.
            config["base_model_name_or_path"] = portable["id"]
            config_file.write_text(json.dumps(config, indent=2, sort_keys=True))
            (target / "base_model.json").write_text(json.dumps(portable, indent=2) + "\n")
            entry["adapter"] = str(target.relative_to(output))
        if merge:
            merged = _merge(
                base,
                output / agent / "adapter" if adapter else None,
                output / agent / "merged",
                merged_dtype,
            )
            entry["merged"] = str(merged.relative_to(output))
        index["agents"][agent] = entry
    (output / "marft_export.json").write_text(
        json.dumps(index, indent=2, sort_keys=True, default=str)
    )
    return index


def _merge(base: str, adapter: Path | None, target: Path, dtype: str) -> Path:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from marft_algos.policy.pretrained import resolve_model

    path = resolve_model(base)
    # Merge in float32 (the adapter's precision), then cast: a merge in bfloat16 would round twice.
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(path)
    if adapter is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
    if dtype == "base":
        recorded = getattr(AutoConfig.from_pretrained(path), "torch_dtype", None)
        target_dtype = recorded if isinstance(recorded, torch.dtype) else torch.float32
    else:
        target_dtype = getattr(torch, dtype)
    model = model.to(target_dtype)  # type: ignore[arg-type]  # transformers types .to() narrowly
    model.config.torch_dtype = target_dtype
    model.save_pretrained(target)
    tokenizer.save_pretrained(target)
    return target


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run ``marft export RUN_OR_CHECKPOINT``; returns the export index."""
    from rich.console import Console

    from marft_algos.cli.evaluate import open_checkpoint

    argv = list(sys.argv[1:] if argv is None else argv)
    args, values = parse_run_command(
        ExportArguments,
        argv,
        prog="marft export",
        description="Export each agent's adapter (and, with --merge, a merged model).",
    )
    with open_checkpoint(values["run"]) as checkpoint:
        run_root = (
            checkpoint.parent
            if Path(values["run"]).resolve() == checkpoint.resolve()
            else Path(values["run"])
        )
        output = Path(args.output_dir) if args.output_dir else run_root / "export"
        if output.exists() and any(output.iterdir()):
            if not args.overwrite:
                raise UsageError(
                    f"Export folder {str(output)!r} is not empty; pass --overwrite or another --output-dir."
                )
            shutil.rmtree(output)
        index = export_checkpoint(
            checkpoint, output, merge=args.merge, merged_dtype=args.merged_dtype
        )
    console = Console()
    for agent, entry in index["agents"].items():
        parts = [
            f"adapter {output / entry['adapter']}"
            if entry["adapter"]
            else "no adapter (base model)"
        ]
        if entry["merged"]:
            parts.append(f"merged {output / entry['merged']}")
        console.print(f"[bold]{agent}[/]: " + ", ".join(parts))
    return index
