"""``marft train``: train an LLM team on a registered env with one of the trainers.

Every field of the chosen trainer's config is a flag (``marft train --algo grpo --help`` lists
GRPO's). Values come from, in increasing priority: the config class's paper defaults, the CLI
preset for the model (:func:`~marft_algos.cli.presets.preset_for`, off with ``--paper-defaults``),
a ``--config run.yaml`` file, and the flags. Everything is checked before the model loads.

This module is the command's flow: parse, plan the env, check the run folder, build, train,
report. Its parts live beside it: the arguments and their parsing
(:mod:`~marft_algos.cli.train_arguments`) and what a run is built from
(:mod:`~marft_algos.cli.train_build`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from marft_algos.cli.env_plan import EnvPlan, plan_env
from marft_algos.cli.parsing import UsageError
from marft_algos.cli.presets import choose_preset, scale_for_world
from marft_algos.cli.profiles import with_profiles
from marft_algos.cli.program_failures import reporting_program_failures
from marft_algos.cli.run_report import plot_curve, show_samples, summarize
from marft_algos.cli.task_sources import check_resumed_tasks
from marft_algos.cli.train_arguments import TrainArguments, parse_train_args
from marft_algos.cli.train_build import (
    build_config,
    build_policy,
    build_rollout_backend,
    check_caps,
    warm_start,
)
from marft_algos.runs.folder import ConfigMismatchError, RunDirectory, RunExistsError
from marft_algos.trainers.branched import describe_branching
from marft_algos.trainers.registry import build_trainer

__all__ = ["TrainArguments", "UsageError", "build_config", "main", "parse_train_args"]

logger = logging.getLogger(__name__)


def _check_resume_matches(
    run_dir: RunDirectory, record: Mapping[str, Any], algo: str, allowed: bool
) -> None:
    saved = run_dir.read_config()
    if saved is None:
        return
    before = {
        "algorithm": saved.get("algorithm"),
        **{k: (saved.get("run") or {}).get(k) for k in record},
    }
    now = {"algorithm": algo, **record}
    changed = {
        k: (before[k], now[k]) for k in now if before.get(k) is not None and before[k] != now[k]
    }
    if changed and not allowed:
        detail = "; ".join(f"{k}: run {a!r} vs now {b!r}" for k, (a, b) in changed.items())
        raise ConfigMismatchError(
            f"--resume would continue {str(run_dir.path)!r} as a different run ({detail}). Resume with the "
            f"run's settings, or pass --allow-config-change."
        )


def main(
    argv: Sequence[str] | None = None, *, defaults: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Run ``marft train``; returns the run's records, its evaluations and its folder."""
    import sys

    from rich.console import Console

    from marft_algos.distributed import init_distributed
    from marft_algos.policy.pretrained import check_model_name

    argv = list(sys.argv[1:] if argv is None else argv)
    args, _, values, given = parse_train_args(argv, defaults)
    if args.rollout_backend == "vllm":
        from marft_algos.rollout.vllm import import_vllm

        import_vllm()  # before anything loads: a missing engine is one line with the install command
    # One process, or a rank of torchrun / accelerate launch (gloo on CPU, nccl on GPU).
    dist = init_distributed(args.device)
    console = Console(quiet=not dist.is_main)
    values, scaled = scale_for_world(values, given, dist.world_size)
    if scaled:
        console.print(scaled)
    dtype = args.dtype or ("bfloat16" if dist.device.type == "cuda" else "float32")
    plan = plan_env(
        args.env,
        with_profiles(args.env_kwargs, args.profiles),
        dataset=args.dataset,
        eval_dataset=args.eval_dataset,
        levels=args.levels,
        subjects=args.subjects,
        given=given,
    )
    check_caps(values, given, plan.agents)
    if values.get("output_dir") is None:
        values["output_dir"] = f"runs/{plan.env_id.split(':')[-1]}-{args.algo}"
    config = build_config(args.algo, values, plan.agents)

    check_model_name(args.model)
    run_dir = RunDirectory(config.output_dir)
    fresh_folder = not run_dir.path.exists()
    if dist.is_main:  # the other ranks only read the folder; rank 0 writes it
        run_dir.acquire()
    try:
        with reporting_program_failures(run_dir.path, write=dist.is_main):
            return _train(args, config, plan, dist, dtype, run_dir, console)
    except BaseException:
        if dist.is_main and fresh_folder:
            # A run that failed before writing anything leaves no folder holding only its lock.
            run_dir.discard_if_empty()
        raise


def _train(
    args: TrainArguments,
    config: Any,
    plan: EnvPlan,
    dist: Any,
    dtype: str,
    run_dir: RunDirectory,
    console: Any,
) -> dict[str, Any]:
    import torch

    record = {
        "env_id": args.env,
        "env_kwargs": plan.env_kwargs,
        "data": plan.data,
        "model": args.model,
        "lora": {"r": args.lora_rank, "alpha": args.lora_alpha},
        # Both change what the remaining iterations compute (rounding, reduction order).
        "threads": args.threads,
        "dtype": dtype,
        "attn_implementation": args.attn_implementation,
    }
    if args.resume:
        _check_resume_matches(run_dir, record, args.algo, args.allow_config_change)
        saved = run_dir.read_config()
        check_resumed_tasks(saved, plan.env_id, plan.env_kwargs, args.allow_config_change)
    elif run_dir.has_run() and not config.overwrite:
        raise RunExistsError(
            f"{str(run_dir.path)!r} already holds {run_dir.describe()}. Pass --resume to continue it, "
            f"--overwrite to replace it, or choose another --output-dir."
        )

    torch.set_num_threads(args.threads)
    train_fn, eval_fn = plan.factories()
    console.print(
        f"[bold]{args.algo}[/] on [bold]{args.env}[/] (agents: {', '.join(plan.agents)}), model "
        f"[bold]{args.model}[/], output {config.output_dir}"
        + (f", {dist.world_size} processes" if dist.enabled else "")
        + (" (base sharded: --fsdp)" if config.fsdp and dist.enabled else "")
    )
    if config.branch is not None:  # what a task costs, before the run starts
        generations = getattr(config, "num_generations", 1)
        console.print(describe_branching(config.branch, generations, config.episodes_per_iteration))
    preset = choose_preset(args.model, args.preset, paper_defaults=args.paper_defaults)
    console.print(
        f"preset [bold]{preset}[/] ({'--preset' if args.preset or args.paper_defaults else 'for ' + args.model}); "
        f"flags you set override it"
    )
    policy, template = build_policy(args, plan.agents, config, dist, dtype)
    if args.init_from is not None:
        console.print(f"adapters from {warm_start(policy, args.init_from, config, dist)}")
    backend = build_rollout_backend(args, policy, config, dist)
    trainer = build_trainer(
        args.algo,
        policy,
        train_fn,
        config,
        eval_env_fn=eval_fn,
        critic_seed=config.seed,
        rollout_backend=backend,
    )
    trainer.run_info.update(record)
    trainer.run_info.update(
        {
            "device": str(dist.device),
            "chat_template": template,
            "rollout_backend": args.rollout_backend,
            "init_from": args.init_from,
        }
    )
    if args.resume:
        trainer.resume(args.resume_from, allow_config_change=args.allow_config_change)
        console.print(f"resumed at iteration {trainer.iteration}")
    try:
        records = trainer.train(progress=False if args.progress == "off" else args.progress)
    finally:
        trainer.close()
        if backend is not None:
            backend.close()
    evals = [r for r in trainer.logger.records if "eval/accuracy" in r]
    if dist.is_main:
        show_samples(console, config.output_dir, min(config.eval_samples, 2))
    paired = summarize(console, evals, config)
    if args.plot and dist.is_main:
        plot_curve(console, trainer.logger.records, config.output_dir, f"{args.algo} on {args.env}")
    return {
        "records": records,
        "evals": evals,
        "paired": paired,
        "output_dir": config.output_dir,
        "config": dataclasses.asdict(config),
    }
