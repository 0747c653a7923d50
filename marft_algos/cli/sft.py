"""``marft sft``: fine-tune each agent's adapter on its own replies in recorded transcripts.

    marft train --output-dir runs/dual --trace-file runs/dual.trace.jsonl --trace-content
    marft sft --from runs/dual.trace.jsonl --env math-dual-v7 --min-reward 1 --output-dir runs/sft
    marft train --init-from runs/sft ...

Episodes recorded in an evaluation (held-out problems) are left out unless ``--allow-held-out``
(:attr:`~marft_algos.trainers.sft_data.Transcript.held_out`).
``--from`` (repeatable) takes a marft run folder (its ``samples.jsonl``), a transcript file, the
JSON of ``marft eval --samples N --json``, recorded traces (OTLP JSON files, a folder of them) or
a JSON-lines chat log (:mod:`marft_algos.trainers.sft_data`). Every field of :class:`~marft_algos.trainers.sft.SFTConfig`
is a flag. The team is the env's (``--env``; default: the first ``--from`` run's env) or
``--agents a,b``; when the first source is a run folder, its model, env, LoRA settings, chat
template and reply budgets are the defaults, so that ``marft train --init-from`` on the same env
and model accepts the adapters. Otherwise the reply budgets are ``marft train``'s preset for the
model.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from marft_algos.cli.parsing import UsageError, build_parser, parse_with, pick
from marft_algos.cli.presets import DEFAULT_MODEL, preset_for
from marft_algos.cli.train_build import as_flags, check_caps, read_chat_template
from marft_algos.trainers.sft_config import SFTConfig

__all__ = ["SFTArguments", "main"]

logger = logging.getLogger(__name__)


@dataclass
class SFTArguments:
    """Which team and model to fine-tune: the settings outside :class:`SFTConfig`."""

    model: str = DEFAULT_MODEL
    """Base model (default: the first --from run's model, else the built-in one)."""
    env: str | None = None
    """Env whose team is trained: its agents, in its order (default: the first --from run's env)."""
    env_kwargs: dict[str, Any] | None = None
    """Env constructor arguments as JSON (default: the first --from run's)."""
    agents: str | None = None
    """The team's agents in order, comma-separated, instead of --env (e.g. reasoner,actor)."""
    agent_names: dict[str, str] | None = None
    """Recorded agent names to the team's, as JSON, e.g. '{"gpt-4o-mini": "solver"}' (a trace
    names a call's agent by gen_ai.agent.name, else the request model)."""
    lora_rank: int = 8
    """LoRA rank of every agent's adapter (use marft train's --lora-rank)."""
    lora_alpha: float = 16
    """LoRA alpha (use marft train's --lora-alpha)."""
    chat_template: str | None = None
    """Chat template (a Jinja file or the template text) for a tokenizer that has none."""
    threads: int = 1
    """Torch CPU threads."""
    device: str | None = None
    """Torch device (default: cuda if there is one, else cpu)."""
    dtype: Literal["float32", "bfloat16", "float16"] | None = None
    """Weight dtype; default float32 on CPU, bfloat16 on GPU."""

    def __post_init__(self) -> None:
        if self.threads < 1:
            raise UsageError(f"--threads {self.threads}: pass 1 or more.")
        if self.lora_rank < 1:
            raise UsageError(f"--lora-rank {self.lora_rank}: the LoRA rank must be >= 1 (e.g. 8).")


def _run_config(source: str) -> dict[str, Any]:
    """The config.json of a run folder ``source`` ({} for a file or a folder without one)."""
    from marft_algos.runs.folder import RunDirectory

    path = Path(source)
    if not path.is_dir():
        return {}
    return RunDirectory(path).read_config() or {}


def _defaults(model: str | None, run: Mapping[str, Any]) -> dict[str, Any]:
    """Defaults from the preset for the model, then from the source run's config."""
    recorded = run.get("run") or {}
    model = model or recorded.get("model") or DEFAULT_MODEL
    preset = preset_for(model, paper_defaults=False, preset=None, algorithm="action-marft")
    out: dict[str, Any] = {
        "model": model,
        **{k: preset[k] for k in ("max_new_tokens", "max_new_tokens_per_agent") if k in preset},
    }
    for key in ("max_new_tokens", "max_new_tokens_per_agent"):
        if key in run:
            out[key] = run[key]
    if recorded.get("env_id"):
        out["env"] = recorded["env_id"]
        out["env_kwargs"] = recorded.get("env_kwargs") or None
    lora = recorded.get("lora") or {}
    out.update({f"lora_{n}": lora[k] for k, n in (("r", "rank"), ("alpha", "alpha")) if k in lora})
    if recorded.get("chat_template"):
        out["chat_template"] = recorded["chat_template"]
    return out


def _agents(args: SFTArguments) -> list[str]:
    if args.agents:
        agents = [a.strip() for a in args.agents.split(",") if a.strip()]
        if len(set(agents)) != len(agents):
            raise UsageError(f"--agents {args.agents!r} names an agent twice.")
        return agents
    if args.env is None:
        raise UsageError(
            "say whose team to fine-tune: --env ENV (its agents, in order) or --agents a,b; the "
            "first --from is no marft run folder that records its env."
        )
    from marft_algos.cli.env_plan import plan_env

    return plan_env(args.env, args.env_kwargs).agents


def _data_plan(args: SFTArguments) -> dict[str, Any] | None:
    """The data plan ``marft train --env`` would use (None: no env, or one without data)."""
    if args.agents or args.env is None:
        return None
    from marft_algos.cli.env_plan import plan_env

    return plan_env(args.env, args.env_kwargs).data


def parse_sft_args(argv: Sequence[str]) -> tuple[SFTArguments, SFTConfig, list[str], list[str]]:
    """Parse ``marft sft``; returns the arguments, the config, the sources and the agents."""
    pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    pre.add_argument("--from", dest="sources", action="append", default=[])
    pre.add_argument("--model")
    known, _ = pre.parse_known_args(list(argv))
    run = _run_config(known.sources[0]) if known.sources else {}
    parser = build_parser(
        [SFTArguments, SFTConfig],
        prog="marft sft",
        description=(
            "Fine-tune each agent's adapter on its own replies in recorded transcripts (a warm "
            "start for marft train --init-from). Defaults shown include the first --from run's."
        ),
        defaults=_defaults(known.model, run),
    )
    parser.add_argument(
        "--from",
        dest="sources",
        action="append",
        required=True,
        metavar="RUN_OR_FILE",
        help="A marft run folder, a samples.jsonl(.gz), marft eval --json output, an OTLP JSON "
        "trace file (or a folder of them), or a JSON-lines chat log (repeat for several).",
    )
    parser.add_argument(
        "--out", dest="output_dir", default=argparse.SUPPRESS, help="Same as --output-dir."
    )
    values, given = parse_with(parser, argv)
    args = SFTArguments(**pick(values, SFTArguments))
    agents = _agents(args)
    config_values = pick(values, SFTConfig)
    if config_values.get("output_dir") is None:
        raise UsageError("pass --output-dir DIR (or --out DIR): where the run folder goes.")
    check_caps(config_values, given, agents)
    try:
        config = SFTConfig(**config_values)
    except ValueError as exc:
        raise UsageError(f"marft sft: {as_flags(str(exc), config_values)}") from None
    return args, config, list(values["sources"]), agents


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run ``marft sft``; returns the metric records, the counts and the run folder."""
    import torch
    from rich.console import Console

    from marft_algos.policy import LoraSettings, MultiAgentPolicy
    from marft_algos.policy.pretrained import check_model_name
    from marft_algos.policy.rendering import fill_chat_template
    from marft_algos.trainers.sft import SFTTrainer
    from marft_algos.trainers.sft_data import read_transcripts

    argv = list(sys.argv[1:] if argv is None else argv)
    args, config, sources, agents = parse_sft_args(argv)
    console = Console()
    transcripts = [
        t for source in sources for t in read_transcripts(source, agents=args.agent_names)
    ]
    check_model_name(args.model)
    torch.set_num_threads(args.threads)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    dtype = args.dtype or ("bfloat16" if str(device).startswith("cuda") else "float32")
    policy = MultiAgentPolicy.from_pretrained(
        args.model,
        agents,
        lora=LoraSettings(r=args.lora_rank, alpha=args.lora_alpha),
        device=device,
        torch_dtype=getattr(torch, dtype),
        seed=config.seed,
    )
    template = read_chat_template(args.chat_template)
    fill_chat_template(policy, template)
    run_info = {
        "model": args.model,
        "agents": agents,
        "env_id": args.env,
        "env_kwargs": args.env_kwargs or {},
        # The env's data plan, so that marft eval of the run holds out what marft train would.
        "data": _data_plan(args),
        "sources": [str(s) for s in sources],
        "lora": {"r": args.lora_rank, "alpha": args.lora_alpha},
        "chat_template": template,
        "threads": args.threads,
        "dtype": dtype,
        "device": str(device),
    }
    trainer = SFTTrainer(policy, transcripts, config, run_info=run_info)
    counts = trainer.counts
    console.print(
        f"[bold]sft[/] of {', '.join(agents)} on [bold]{args.model}[/]: {counts['episodes_kept']} "
        f"of {counts['episodes_read']} episodes kept, {counts['examples']} replies to train on "
        f"({counts['cut_at_budget']} cut at their budget, {counts['too_long']} over --max-length)"
    )
    records = trainer.train()
    for agent in agents:
        losses = [r[f"sft/loss/{agent}"] for r in records if f"sft/loss/{agent}" in r]
        if losses:
            console.print(f"{agent}: loss per reply token {losses[0]:.3f} → {losses[-1]:.3f}")
    console.print(
        f"adapters in {config.output_dir}; continue with RL: marft train --init-from "
        f"{config.output_dir}" + (f" --env {args.env}" if args.env else "")
    )
    return {"records": records, "counts": dict(counts), "output_dir": config.output_dir}
