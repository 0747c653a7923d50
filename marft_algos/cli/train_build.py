"""What a ``marft train`` run is built from: the trainer's config (checked, its errors naming
flags), the team's policy, and the rollout backend that generates its episodes."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from marft_algos.cli.parsing import UsageError
from marft_algos.cli.train_arguments import TrainArguments
from marft_algos.trainers.registry import ALGORITHMS

__all__ = [
    "as_flags",
    "build_config",
    "build_policy",
    "build_rollout_backend",
    "check_caps",
    "load_device",
    "read_chat_template",
    "warm_start",
]


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


def check_caps(values: dict[str, Any], given: set[str], agents: list[str]) -> None:
    """Check ``--max-new-tokens-per-agent`` against the env's agents; a cap the preset set (not
    given) keeps only the team's agents, and none for a lone agent."""
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


def read_chat_template(value: str | None) -> str | None:
    """``--chat-template``: a file's text, or the value itself when it names no file."""
    if value is None:
        return None
    path = Path(value)
    return path.read_text(encoding="utf-8") if path.is_file() else value


def build_policy(
    args: TrainArguments, agents: Sequence[str], config: Any, dist: Any, dtype: str
) -> tuple[Any, str | None]:
    """The team's policy as ``args`` describe it, loaded where :func:`load_device` says, and the
    chat template it was given (None: its tokenizer's own)."""
    import torch

    from marft_algos.policy import LoraSettings, MultiAgentPolicy
    from marft_algos.policy.rendering import fill_chat_template

    policy = MultiAgentPolicy.from_pretrained(
        args.model,
        agents,
        lora=LoraSettings(r=args.lora_rank, alpha=args.lora_alpha),
        device=load_device(config, dist),
        torch_dtype=getattr(torch, dtype),
        seed=config.seed,
        model_kwargs=(
            {"attn_implementation": args.attn_implementation} if args.attn_implementation else None
        ),
    )
    policy.gradient_checkpointing = args.gradient_checkpointing
    template = read_chat_template(args.chat_template)
    fill_chat_template(policy, template)
    return policy, template


def build_rollout_backend(args: TrainArguments, policy: Any, config: Any, dist: Any) -> Any:
    """The vLLM engine of ``--rollout-backend vllm``; None: the policy generates."""
    if args.rollout_backend != "vllm":
        return None
    from marft_algos.rollout.vllm import VLLMRolloutBackend

    sharded = config.fsdp and dist.enabled
    # One engine per process, on the process's device.
    # Sharded, the trainer serves the adapters once rank 0's weights have filled every rank.
    return VLLMRolloutBackend(policy, args.vllm_settings(), device=dist.device, sync=not sharded)


def load_device(config: Any, dist: Any) -> str:
    """Where the base model loads. Under ``--fsdp`` rank 0 reads the weights into host memory
    and every other rank builds the model empty (the meta device): sharding moves each rank's
    shards to its device and fills them from rank 0, so a node holds one copy of the base, not
    one per process, and no GPU ever holds all of it."""
    if not (config.fsdp and dist.enabled):
        return str(dist.device)
    return "cpu" if dist.rank == 0 else "meta"


def warm_start(policy: Any, path: str, config: Any, dist: Any) -> str:
    """``--init-from``: load the adapters of the run or checkpoint at ``path`` into ``policy``;
    returns the checkpoint read. Under ``--fsdp`` only rank 0 reads them (the other ranks' models
    are empty until sharding fills them from rank 0's)."""
    from marft_algos.trainers.warm_start import init_adapters, warm_start_checkpoint

    if load_device(config, dist) == "meta":
        return str(warm_start_checkpoint(path))
    return str(init_adapters(policy, path))
