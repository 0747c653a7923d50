"""What ``marft train`` is asked: its own settings (:class:`TrainArguments`, the fields outside the
trainer's config) and how the command line becomes them and the trainer's config values.

Values come from, in increasing priority: the config class's paper defaults, the CLI preset for
the model (:func:`~marft_algos.cli.presets.preset_for`, off with ``--paper-defaults``), a
``--config run.yaml`` file, and the flags.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from marft_algos.cli.config_files import check_config_values, load_config_file
from marft_algos.cli.env_plan import program_settings_help
from marft_algos.cli.parsing import UsageError, build_parser, did_you_mean, parse_with, pick
from marft_algos.cli.presets import DEFAULT_MODEL, preset_for
from marft_algos.trainers.registry import ALGORITHMS, owners_of

__all__ = ["TrainArguments", "argv_config", "parse_train_args"]


@dataclass
class TrainArguments:
    """What to train, on what, and where: the settings outside the trainer's config."""

    env: str = "math-dual-v7"
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
    init_from: str | None = None
    """Start from the adapters of this run instead of fresh ones: marft sft's --output-dir (a
    warm start), or any run or checkpoint-N folder of the same agents, base model and LoRA
    settings; the optimizers and everything else start fresh."""
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
