"""``marft train``: train an LLM team on a registered env with one of the trainers.

Every field of the chosen trainer's config is a flag (``marft train --algo grpo --help`` lists
GRPO's). Values come from, in increasing priority: the config class's paper defaults, the CLI
preset for the model (:func:`~marft_algos.cli.presets.preset_for`, off with ``--paper-defaults``),
a ``--config run.yaml`` file, and the flags. Everything is checked before the model loads.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from marft_algos.cli.config_files import check_config_values, load_config_file
from marft_algos.cli.env_plan import EnvPlan, plan_env, program_settings_help
from marft_algos.cli.parsing import UsageError, build_parser, did_you_mean, parse_with, pick
from marft_algos.cli.presets import DEFAULT_MODEL, choose_preset, preset_for, scale_for_world
from marft_algos.cli.profiles import with_profiles
from marft_algos.cli.program_failures import reporting_program_failures
from marft_algos.cli.run_report import plot_curve, show_samples, summarize
from marft_algos.cli.task_sources import check_resumed_tasks
from marft_algos.runs.folder import ConfigMismatchError, RunDirectory, RunExistsError
from marft_algos.trainers.branched import describe_branching
from marft_algos.trainers.registry import ALGORITHMS, build_trainer, owners_of

__all__ = ["TrainArguments", "main"]

logger = logging.getLogger(__name__)


@dataclass
class TrainArguments:
    """What to train, on what, and where: the settings outside the trainer's config."""

    env: str = "math-dual-v6"
    """Registered env id (marft envs lists them), or 'package.module:name-vN' to import the module that registers it first."""
    algo: str = "action-marft"
    """Training algorithm (the choices: every registered trainer)."""
    model: str = DEFAULT_MODEL
    """Base model: a built-in short name, a local folder, or a Hub id in the local cache."""
    config: str | None = None
    """YAML file of field: value lines (any flag's name); flags on the command line override it."""
    dataset: str | None = None
    """Training problems, for envs that take a dataset, as the env's data family names them: math: builtin:train (default), a MATH/GSM8K JSONL, a table or hf:<name>; code: builtin:train (default), an MBPP JSON/JSONL or a HumanEval JSONL file."""
    eval_dataset: str | None = None
    """Held-out problems (default: builtin:test with built-in data, else 10% of --dataset)."""
    levels: str | None = None
    """Math data: keep only these difficulty levels, e.g. 1,2, or 'all' (default: 1,2,3 with built-in data, else all)."""
    subjects: str | None = None
    """Math data: keep only these subjects (built-in data: generator families), or 'all' (default: digits with built-in data, else all)."""
    env_kwargs: dict[str, Any] | None = None
    """Extra env constructor arguments as JSON, e.g. '{"max_attempts": 2}'."""
    profiles: str | None = None
    """A YAML file of the agents' system prompts (system_prompts: {agent: prompt}) and, optionally, message_layout: user (the prompt opens the user message); see docs/cli.md."""
    resume: bool = False
    """Continue the run in --output-dir from its newest checkpoint (or from the start if it has none)."""
    resume_from: str | None = None
    """Continue from this checkpoint folder instead of the newest one."""
    allow_config_change: bool = False
    """Let --resume continue a run under settings that differ from the checkpoint's."""
    lora_rank: int = 8
    """LoRA rank of every agent's adapter."""
    lora_alpha: float = 16
    """LoRA alpha."""
    chat_template: str | None = None
    """Chat template (a Jinja file or the template text) for a tokenizer that has none."""
    threads: int = 1
    """Torch CPU threads; small models run fastest on one, a large model wants more."""
    device: str | None = None
    """Torch device: cpu, cuda (under torchrun each rank takes its LOCAL_RANK's GPU) or cuda:N;
    default: this rank's GPU if there is one, else cpu."""
    dtype: Literal["float32", "bfloat16", "float16"] | None = None
    """Weight dtype; default float32 on CPU, bfloat16 on GPU."""
    gradient_checkpointing: bool = False
    """Recompute each decoder layer's activations in the update's backward pass instead of keeping
    them: far less activation memory on a large model, for one more forward pass of each layer."""
    attn_implementation: str | None = None
    """Attention kernel of the policy's model, as transformers names it: sdpa (its default),
    eager, or flash_attention_2 (needs the flash-attn package and a GPU)."""
    paper_defaults: bool = False
    """Use the config classes' paper defaults instead of the CLI preset for the model (--preset paper)."""
    preset: str | None = None
    """Defaults to start from: cpu-demo (the built-in model), smollm2-cpu (smollm2-135m-instruct),
    pretrained (any other model), paper (the config classes' defaults); default: chosen by --model."""
    plot: bool = True
    """Write learning_curve.png (--no-plot to skip)."""
    progress: Literal["auto", "rich", "plain", "off"] = "auto"
    """Progress display: a rich bar on a terminal and one log line per iteration elsewhere (auto)."""
    rollout_backend: Literal["transformers", "vllm"] = "transformers"
    """What generates the training rollouts: the policy itself (transformers), or one vLLM engine
    serving every agent's adapter (needs the vllm extra; README: Faster rollouts with vLLM)."""
    vllm_kv_cache_gb: float | None = None
    """vLLM engine: KV-cache space in GiB (default 1 on a CPU; on a GPU the memory fraction decides)."""
    vllm_gpu_memory_utilization: float = 0.3
    """vLLM engine: fraction of the GPU's memory it may take (the rest is the trainer's)."""
    vllm_max_loras: int | None = None
    """vLLM engine: adapters one batch may mix (default: the team's number of adapters)."""
    vllm_max_model_len: int | None = None
    """vLLM engine: longest prompt + action in tokens (default: the model's context; a shorter one
    leaves more of the engine's memory to concurrent sequences)."""
    vllm_enforce_eager: bool = False
    """vLLM engine: no CUDA graphs (starts faster, holds less memory, decodes slower)."""
    vllm_sleep_mode: bool = False
    """vLLM engine: move its weights to CPU memory and free its KV cache during every update and
    evaluation (more GPU memory for training; each wake-up copies the weights back)."""
    vllm_seed_requests: bool = False
    """vLLM engine: seed every request (exactly repeatable samples, resumes included; vLLM's
    slower per-request sampler). Default: the engine's seeded RNG samples."""
    vllm_prefix_caching: bool = True
    """vLLM engine: automatic prefix caching (prompts that begin alike reuse KV blocks; blocks are
    keyed by adapter version). --no-vllm-prefix-caching turns it off."""
    vllm_tensor_parallel_size: int = 1
    """vLLM engine: GPUs it splits the base over (a base larger than one GPU). Under torchrun each
    group of that many consecutive ranks shares one engine and samples the same episodes."""
    vllm_probe_tolerance: float | None = None
    """vLLM engine: largest engine-vs-policy log-prob gap the post-sync probe accepts (default 1e-3
    for float32 weights, 1.0 for 16-bit: measured bf16 kernel gaps reach 0.36)."""

    def __post_init__(self) -> None:
        if self.threads < 1:
            raise UsageError(
                f"--threads {self.threads}: torch needs at least one thread; pass --threads 1 or more."
            )
        if self.lora_rank < 1:
            raise UsageError(f"--lora-rank {self.lora_rank}: the LoRA rank must be >= 1 (e.g. 8).")
        if not (math.isfinite(self.lora_alpha) and self.lora_alpha > 0):
            raise UsageError(
                f"--lora-alpha {self.lora_alpha}: LoRA alpha must be a finite number > 0 (the update "
                f"is scaled by alpha / rank; e.g. 16)."
            )
        if self.device is not None:
            from marft_algos.distributed import parse_device

            parse_device(self.device)
        if self.resume_from is not None:
            self.resume = True
        self.vllm_settings()  # its checks name the field; the flags share the names

    def vllm_settings(self) -> Any:
        """The vLLM engine settings of ``--rollout-backend vllm``."""
        from marft_algos.rollout.vllm import VLLMSettings

        try:
            return VLLMSettings(
                kv_cache_gb=self.vllm_kv_cache_gb,
                gpu_memory_utilization=self.vllm_gpu_memory_utilization,
                max_loras=self.vllm_max_loras,
                max_model_len=self.vllm_max_model_len,
                enforce_eager=self.vllm_enforce_eager,
                sleep_mode=self.vllm_sleep_mode,
                seed_requests=self.vllm_seed_requests,
                probe_tolerance=self.vllm_probe_tolerance,
                tensor_parallel_size=self.vllm_tensor_parallel_size,
                prefix_caching=self.vllm_prefix_caching,
            )
        except ValueError as exc:
            raise UsageError(f"--vllm-* option: {exc}") from None


def _preparse(argv: Sequence[str]) -> tuple[dict[str, Any], str, type]:
    """The config file's values, the algorithm and its config class (needed to build the parser)."""
    pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    pre.add_argument("--config")
    pre.add_argument("--algo")
    known, _ = pre.parse_known_args(list(argv))
    file_values = load_config_file(known.config) if known.config else {}
    algo = known.algo or file_values.get("algo") or "action-marft"
    if algo not in ALGORITHMS:
        raise UsageError(f"--algo {algo!r} is not a trainer; choose one of {sorted(ALGORITHMS)}.")
    return file_values, algo, ALGORITHMS[algo][0]


def _unknown_hint(algo: str):
    def hint(flag: str) -> str | None:
        name = flag.lstrip("-").replace("-", "_")
        if name.startswith("no_"):
            name = name[3:]
        owners = owners_of(name)
        if owners:
            return (
                f"{flag} is an option of --algo {' / '.join(owners)}; --algo {algo} does not use it"
            )
        return None

    return hint


def parse_train_args(
    argv: Sequence[str], defaults: Mapping[str, Any] | None = None
) -> tuple[TrainArguments, type, dict[str, Any], set[str]]:
    """Parse ``marft train`` arguments.

    Returns:
        ``(run arguments, config class, config values, fields given explicitly)``.
    """
    file_values, algo, config_class = _preparse(argv)
    pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    pre.add_argument("--model")
    pre.add_argument("--paper-defaults", "--paper_defaults", action="store_true")
    pre.add_argument("--preset")
    known, _ = pre.parse_known_args(list(argv))
    model = known.model or file_values.get("model") or DEFAULT_MODEL
    paper = known.paper_defaults or bool(file_values.get("paper_defaults"))
    preset = known.preset or file_values.get("preset")
    try:
        merged = {
            **preset_for(model, paper_defaults=paper, preset=preset, algorithm=algo),
            **dict(defaults or {}),
            **file_values,
        }
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    types = [TrainArguments, config_class]
    parser = build_parser(
        types,
        prog="marft train",
        description=(
            f"Train an LLM team with {algo} (flags below are {algo}'s; --algo NAME --help shows another "
            f"trainer's). Defaults shown include the preset for the model."
        ),
        defaults=merged,
    )
    for action in parser._actions:
        if action.dest == "algo":
            action.choices = sorted(ALGORITHMS)
        elif action.dest == "env_kwargs":
            action.help = (action.help or "") + program_settings_help()
    fields = {a.dest for a in parser._actions}
    stray = sorted(set(file_values) - fields)
    if stray:
        where = {k: owners_of(k) for k in stray}
        detail = ", ".join(
            f"{k} ({'--algo ' + '/'.join(v) + ' only' if v else 'unknown' + did_you_mean(k, sorted(fields))})"
            for k, v in where.items()
        )
        raise UsageError(
            f"--config {argv_config(argv)!r} sets fields {algo} does not have: {detail}."
        )
    checked = check_config_values(file_values, types, argv_config(argv))
    parser.set_defaults(**checked)
    values, given = parse_with(parser, argv, unknown_hint=_unknown_hint(algo))
    args = TrainArguments(**pick(values, TrainArguments))
    return args, config_class, pick(values, config_class), given | set(file_values)


def argv_config(argv: Sequence[str]) -> str | None:
    for i, arg in enumerate(argv):
        if arg.startswith("--config="):
            return arg.split("=", 1)[1]
        if arg == "--config" and i + 1 < len(argv):
            return argv[i + 1]
    return None


def build_config(algo: str, values: Mapping[str, Any], agents: Sequence[str]) -> Any:
    """The trainer's config from the parsed values, checked by the config and the trainer's team
    check; their messages name flags (``--lam-token``) instead of fields (``lam_token``)."""
    config_class, trainer_class = ALGORITHMS[algo]
    try:
        trainer_class.check_team(agents)
        return config_class(**values)
    except ValueError as exc:
        raise UsageError(f"--algo {algo}: {as_flags(str(exc), values)}") from None


def as_flags(message: str, fields: Iterable[str]) -> str:
    """``message`` with config field names written as flags: ``lam_token=0.9`` → ``--lam-token=0.9``.

    A name with an underscore is a field wherever it stands as a word; a plain word (``level``,
    ``epsilon``) only where it is given a value (``epsilon=0.2``), not inside a Python call.
    """
    for name in sorted(fields, key=len, reverse=True):
        after = r"\b" if "_" in name else r"(?==)"
        flag = "--" + name.replace("_", "-")
        # "ActionMARFTConfig.lam_token" names the field too: the flag stands for both.
        message = re.sub(rf"(?<![\w(,\-])(?:[A-Z]\w*\.)?{re.escape(name)}{after}", flag, message)
    return message


def _check_caps(values: dict[str, Any], given: set[str], agents: list[str]) -> None:
    caps = values.get("max_new_tokens_per_agent")
    if not caps:
        return
    unknown = sorted(set(caps) - set(agents))
    if "max_new_tokens_per_agent" not in given:
        # The preset's short cap is for a team's actor, which only writes \boxed{}; a lone agent
        # writes the whole solution, and a team without an actor has nothing to cap.
        kept = {} if len(agents) == 1 else {a: n for a, n in caps.items() if a in agents}
        values["max_new_tokens_per_agent"] = kept or None
        return
    if unknown:
        raise UsageError(
            f"--max-new-tokens-per-agent names agent(s) {unknown} that the env does not have; its agents are "
            f"{agents}. Name only those, e.g. '{{\"{agents[-1]}\": 16}}'."
        )


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


def _chat_template(value: str | None) -> str | None:
    if value is None:
        return None
    path = Path(value)
    return path.read_text(encoding="utf-8") if path.is_file() else value


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
    _check_caps(values, given, plan.agents)
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

    from marft_algos.policy import LoraSettings, MultiAgentPolicy
    from marft_algos.policy.rendering import fill_chat_template

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
    policy = MultiAgentPolicy.from_pretrained(
        args.model,
        plan.agents,
        lora=LoraSettings(r=args.lora_rank, alpha=args.lora_alpha),
        device=_load_device(config, dist),
        torch_dtype=getattr(torch, dtype),
        seed=config.seed,
        model_kwargs=(
            {"attn_implementation": args.attn_implementation} if args.attn_implementation else None
        ),
    )
    policy.gradient_checkpointing = args.gradient_checkpointing
    sharded = config.fsdp and dist.enabled
    template = _chat_template(args.chat_template)
    fill_chat_template(policy, template)
    backend = None
    if args.rollout_backend == "vllm":
        from marft_algos.rollout.vllm import VLLMRolloutBackend

        # One engine per process, on the process's device.
        # Sharded, the trainer serves the adapters once rank 0's weights have filled every rank.
        backend = VLLMRolloutBackend(
            policy, args.vllm_settings(), device=dist.device, sync=not sharded
        )
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


def _load_device(config: Any, dist: Any) -> str:
    """Where the base model loads. Under ``--fsdp`` rank 0 reads the weights into host memory
    and every other rank builds the model empty (the meta device): sharding moves each rank's
    shards to its device and fills them from rank 0, so a node holds one copy of the base, not
    one per process, and no GPU ever holds all of it."""
    if not (config.fsdp and dist.enabled):
        return str(dist.device)
    return "cpu" if dist.rank == 0 else "meta"
