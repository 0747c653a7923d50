"""``marft export``: each agent's adapter as a standard peft folder, optionally merged into its base.

Output layout (``--output-dir``, default ``<run>/export``)::

    marft_export.json         agents → base model (a portable id and how to get it), adapter
                              folder, merged folder, system prompt, token budget; the message
                              layout, chat template and generation settings; the run's env
                              (an agent program's tasks by their source and sha256, not the
                              tasks, unless registered with record_tasks=True)
    run_team.py               with --merge: the team on one held-out task (the run's first
                              greedy transcript) in plain transformers; ``marft export`` prints it
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
import warnings
from collections.abc import Mapping, Sequence
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
    profiles = run.pop("profiles", None) or {}
    generation = run.get("generation") or {}
    caps = generation.get("max_new_tokens_per_agent") or {}
    index: dict[str, Any] = {
        "checkpoint": checkpoint.name,
        "agents": {},
        # How the env wrote each agent's messages (system: a system message holding the agent's
        # system_prompt, then the user message; user: the prompt opens the user message).
        "message_layout": run.get("message_layout"),
        "chat_template": run.get("chat_template"),  # None: each tokenizer's own
        "generation": generation,
        "run": run,
    }
    for agent in manifest["agents"]:
        base = manifest["base_models"][agent]
        portable = portable_base(base)
        adapter = manifest["adapters"][agent]
        profile = profiles.get(agent) or {}
        entry: dict[str, Any] = {
            "base_model": portable["id"],
            "base_model_source": portable,
            "adapter": None,
            "merged": None,
            "system_prompt": profile.get("system_prompt"),
            "graded": profile.get("graded"),
            "max_new_tokens": caps.get(agent, generation.get("max_new_tokens")),
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
                run.get("chat_template"),
            )
            entry["merged"] = str(merged.relative_to(output))
        index["agents"][agent] = entry
    (output / "marft_export.json").write_text(
        json.dumps(index, indent=2, sort_keys=True, default=str)
    )
    return index


def _merge(
    base: str, adapter: Path | None, target: Path, dtype: str, template: str | None = None
) -> Path:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from marft_algos.policy.pretrained import resolve_model
    from marft_algos.policy.rendering import FALLBACK_CHAT_TEMPLATE

    path = resolve_model(base)
    # Merge in float32 (the adapter's precision), then cast: a merge in bfloat16 would round twice.
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(path)
    if not tokenizer.chat_template:  # the template the run rendered prompts with travels along
        tokenizer.chat_template = template or FALLBACK_CHAT_TEMPLATE
    if adapter is not None:
        from peft import PeftModel

        with warnings.catch_warnings():
            # peft asks transformers for a renamed attribute; the FutureWarning is theirs to fix
            # and says nothing about this export.
            warnings.filterwarnings("ignore", ".*is_gradient_checkpointing", FutureWarning)
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


_SCRIPT = '''"""The exported team on one held-out task, in plain transformers (greedy, as marft evaluates).

Written by `marft export --merge`: each agent's merged model, system prompt and token budget, the
run's message layout, and the env's side of one logged episode (the text the env gave each agent
and whose replies it saw; later rounds replay the env's text from that log):
{source}.
"""

import json
from pathlib import Path

from transformers import AutoModelForCausalLM, AutoTokenizer

EXPORT = Path(__file__).resolve().parent
INDEX = json.loads((EXPORT / "marft_export.json").read_text())
# (agent, the env's text for it, earlier turns whose replies it sees)
TURNS = {turns}

models = {{}}
replies = []
for agent, text, sees in TURNS:
    entry = INDEX["agents"][agent]
    if agent not in models:
        folder = EXPORT / entry["merged"]
        models[agent] = (
            AutoTokenizer.from_pretrained(folder),
            AutoModelForCausalLM.from_pretrained(folder),
        )
    tokenizer, model = models[agent]
    user = text + "".join(f"\\n\\n[{{TURNS[j][0]}}]\\n{{replies[j]}}" for j in sees)
    prompt = entry["system_prompt"]
    if prompt and INDEX["message_layout"] == "user":
        messages = [{{"role": "user", "content": f"{{prompt}}\\n\\n{{user}}"}}]
    else:
        messages = [{{"role": "system", "content": prompt}}] if prompt else []
        messages.append({{"role": "user", "content": user}})
    inputs = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    out = model.generate(
        **inputs,
        max_new_tokens=entry["max_new_tokens"],
        do_sample=False,
        pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id,
    )
    replies.append(tokenizer.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True))
    print(f"[{{agent}}]\\n{{replies[-1]}}\\n")
'''


_CALLS_SCRIPT = '''"""The exported team on one held-out task, in plain transformers (greedy, as marft evaluates).

Written by `marft export --merge` from an env that writes its agents' messages itself (an agent
program): each call of one logged episode, {source}, with its messages and tools exactly as the
env gave them, answered afresh by the agent's merged model. The program itself does not run here:
a later call carries the earlier replies as the logged episode's program wrote them.
"""

import json
from pathlib import Path

from transformers import AutoModelForCausalLM, AutoTokenizer

EXPORT = Path(__file__).resolve().parent
INDEX = json.loads((EXPORT / "marft_export.json").read_text())
# (agent, the messages of its call, the tools offered or None)
CALLS = {calls}

models = {{}}
for agent, messages, tools in CALLS:
    entry = INDEX["agents"][agent]
    if agent not in models:
        folder = EXPORT / entry["merged"]
        models[agent] = (
            AutoTokenizer.from_pretrained(folder),
            AutoModelForCausalLM.from_pretrained(folder),
        )
    tokenizer, model = models[agent]
    inputs = tokenizer.apply_chat_template(
        messages, tools=tools, add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    out = model.generate(
        **inputs,
        max_new_tokens=entry["max_new_tokens"],
        do_sample=False,
        pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id,
    )
    reply = tokenizer.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
    print(f"[{{agent}}]\\n{{reply}}\\n")
'''


def _source(transcript: Mapping[str, Any]) -> str:
    return (
        f"held-out episode {transcript.get('episode', 0)} of the evaluation at iteration "
        f"{transcript.get('iteration')}"
    )


def calls_script(transcript: Mapping[str, Any]) -> str:
    """``run_team.py`` for an env that writes its messages itself (an agent program): every
    logged call replayed with its own messages and tools."""
    calls = [(t["agent"], t["messages"], t.get("tools")) for t in transcript.get("turns") or []]
    shown = "[\n" + "".join(f"    {c!r},\n" for c in calls) + "]"
    return _CALLS_SCRIPT.format(calls=shown, source=_source(transcript))


def team_script(index: Mapping[str, Any], transcript: Mapping[str, Any]) -> str:
    """``run_team.py`` for a merged export: the team replaying one logged held-out episode
    (``samples.jsonl`` row ``transcript``)."""
    layout = index.get("message_layout")
    if layout not in ("system", "user"):
        return calls_script(transcript)
    turns: list[tuple[str, str, list[int]]] = []
    logged = list(transcript.get("turns") or [])
    for k, turn in enumerate(logged):
        agent = turn["agent"]
        users = [m["content"] for m in turn["messages"] if m.get("role") == "user"]
        text = users[-1] if users else ""
        prompt = index["agents"][agent].get("system_prompt") or ""
        if layout == "user" and prompt and text.startswith(prompt + "\n\n"):
            text = text[len(prompt) + 2 :]
        sees: list[int] = []
        for j in range(k - 1, -1, -1):  # this round's earlier replies, appended in order
            if logged[j]["timestep"] != turn["timestep"]:
                break
            block = f"\n\n[{logged[j]['agent']}]\n{logged[j]['action']}"
            if text.endswith(block):
                text = text[: -len(block)]
                sees.insert(0, j)
        turns.append((agent, text, sees))
    shown = "[\n" + "".join(f"    {t!r},\n" for t in turns) + "]"
    return _SCRIPT.format(turns=shown, source=_source(transcript))


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
        script = None
        if args.merge:
            script = _write_script(index, run_root, checkpoint, output)
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
    if script is not None:
        console.print(f"\nThe team on one held-out task, in plain transformers ({script}):\n")
        console.print(script.read_text(), markup=False, highlight=False, soft_wrap=True)
    elif args.merge:
        console.print("no run_team.py: the run logged no held-out transcript to replay")
    else:
        console.print("pass --merge for standalone models and a script that runs the team")
    return index


def _write_script(
    index: Mapping[str, Any], run_root: Path, checkpoint: Path, output: Path
) -> Path | None:
    """Write ``run_team.py`` from the latest held-out transcript up to the checkpoint."""
    from marft_algos.runs.samples import read_samples

    try:
        iteration = int(checkpoint.name.rsplit("-", 1)[-1])
    except ValueError:
        iteration = None
    rows = [
        r
        for r in read_samples(run_root)
        if r.get("turns") and (iteration is None or r.get("iteration", 0) <= iteration)
    ]
    if not rows:
        return None
    latest = max(r.get("iteration", 0) for r in rows)
    first = min((r for r in rows if r.get("iteration", 0) == latest), key=lambda r: r["episode"])
    text = team_script(index, first)
    path = output / "run_team.py"
    path.write_text(text, encoding="utf-8")
    return path
