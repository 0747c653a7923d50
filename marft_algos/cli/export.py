"""``marft export``: each agent's adapter as a standard peft folder, optionally merged into its base.

Output layout (``--output-dir``, default ``<run>/export``)::

    marft_export.json         agents → base model, adapter folder, merged folder; the run's env
                              and generation settings
    <agent>/adapter/          adapter_config.json + adapter_model.safetensors (peft format;
                              ``PeftModel.from_pretrained(base, folder)`` loads it)
    <agent>/merged/           with --merge: the base model with the adapter merged in, plus its
                              tokenizer (``AutoModelForCausalLM.from_pretrained`` loads it; serve
                              it with any engine)

Agents that share an adapter get the same files; an agent acting with the plain base model has
no adapter folder (its merged folder is the base model itself).
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


def export_checkpoint(checkpoint: Path, output: Path, *, merge: bool = False) -> dict[str, Any]:
    """Write the export of ``checkpoint`` to ``output``; returns the index written as ``marft_export.json``."""
    from marft_algos.policy.checkpoint import read_manifest
    from marft_algos.policy.pretrained import resolve_model

    manifest = read_manifest(checkpoint)
    output.mkdir(parents=True, exist_ok=True)
    index: dict[str, Any] = {
        "checkpoint": str(checkpoint),
        "agents": {},
        "run": manifest.get("run") or {},
    }
    for agent in manifest["agents"]:
        base = manifest["base_models"][agent]
        adapter = manifest["adapters"][agent]
        entry: dict[str, Any] = {"base_model": base, "adapter": None, "merged": None}
        if adapter is not None:
            source = checkpoint / "adapters" / adapter
            target = output / agent / "adapter"
            shutil.copytree(source, target, dirs_exist_ok=True)
            config_file = target / "adapter_config.json"
            config = json.loads(config_file.read_text())
            # Other tools do not know marft's short names: point at the model's real location.
            config["base_model_name_or_path"] = resolve_model(base)
            config_file.write_text(json.dumps(config, indent=2, sort_keys=True))
            entry["adapter"] = str(target.relative_to(output))
        if merge:
            entry["merged"] = str(
                _merge(
                    base, output / agent / "adapter" if adapter else None, output / agent / "merged"
                ).relative_to(output)
            )
        index["agents"][agent] = entry
    (output / "marft_export.json").write_text(
        json.dumps(index, indent=2, sort_keys=True, default=str)
    )
    return index


def _merge(base: str, adapter: Path | None, target: Path) -> Path:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from marft_algos.policy.pretrained import resolve_model

    path = resolve_model(base)
    model = AutoModelForCausalLM.from_pretrained(path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    if adapter is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
    model.save_pretrained(target)
    tokenizer.save_pretrained(target)
    return target


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run ``marft export RUN_OR_CHECKPOINT``; returns the export index."""
    from rich.console import Console

    from marft_algos.cli.evaluate import find_checkpoint

    argv = list(sys.argv[1:] if argv is None else argv)
    args, values = parse_run_command(
        ExportArguments,
        argv,
        prog="marft export",
        description="Export each agent's adapter (and, with --merge, a merged model).",
    )
    checkpoint = find_checkpoint(values["run"])
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
    index = export_checkpoint(checkpoint, output, merge=args.merge)
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
