"""Saving and loading a policy's adapters in standard peft format.

Layout written by :func:`save_adapters`::

    directory/
        policy.json                  # policy_layout(): agents -> base model, adapter, trainable; LoRA
        <adapter>/adapter_config.json
        <adapter>/adapter_model.safetensors

Each ``<adapter>`` folder is an ordinary peft adapter: ``PeftModel.from_pretrained(base, path,
is_trainable=True)`` loads it on its base model without marft.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from marft_algos.policy.multi_agent import MultiAgentPolicy

__all__ = ["ADAPTER_INDEX", "load_adapters", "policy_layout", "save_adapters"]

#: File naming every agent's base model and adapter, next to the adapter folders.
ADAPTER_INDEX = "policy.json"


def policy_layout(policy: MultiAgentPolicy) -> dict[str, Any]:
    """Which base model, adapter and LoRA settings each agent uses, as JSON.

    The one description of a policy's layout: :func:`save_adapters` writes it as ``policy.json``,
    a checkpoint's manifest holds it (:mod:`marft_algos.runs.checkpoint`), and
    :meth:`MultiAgentPolicy.from_layout` builds the policy back from it.
    """
    return {
        "agents": list(policy.agents),
        "base_models": {a: policy.base_model_name(a) for a in policy.agents},
        "adapters": {a: policy.adapter_name(a) for a in policy.agents},
        "trainable": {a: policy.is_trainable(a) for a in policy.agents},
        "lora": _lora_settings(policy),
    }


def _lora_settings(policy: MultiAgentPolicy) -> dict[str, dict[str, Any]]:
    """Each adapter's LoRA hyper-parameters as peft holds them."""
    out: dict[str, dict[str, Any]] = {}
    for (base, adapter), _agents in policy.adapter_groups().items():
        config = getattr(policy.backbones[base].model, "peft_config", {}).get(adapter)
        if config is None:
            continue
        targets = config.target_modules
        out[adapter] = {
            "r": int(config.r),
            "alpha": float(config.lora_alpha),
            "dropout": float(config.lora_dropout),
            "target_modules": targets if isinstance(targets, str) else sorted(targets),
        }
    return out


def save_one_adapter(backbone: Any, adapter: str, directory: str | Path) -> None:
    """Write one adapter of a backbone as a standard peft adapter folder."""
    from peft.utils import get_peft_model_state_dict
    from safetensors.torch import save_file

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    model = backbone.model
    # No embedding layers are adapted, so peft need not look the base model up (a Hub request).
    state = get_peft_model_state_dict(model, adapter_name=adapter, save_embedding_layers=False)
    state = {k: v.detach().contiguous().cpu() for k, v in state.items()}
    save_file(state, str(out / "adapter_model.safetensors"), metadata={"format": "pt"})
    config = model.peft_config[adapter]
    if not getattr(config, "base_model_name_or_path", None):
        config.base_model_name_or_path = backbone.name
    config.save_pretrained(str(out))


def load_one_adapter(
    backbone: Any, adapter: str, directory: str | Path, *, strict: bool = True
) -> None:
    """Load weights of a peft adapter folder into an existing adapter of a backbone."""
    from peft.utils import set_peft_model_state_dict
    from safetensors.torch import load_file

    path = Path(directory) / "adapter_model.safetensors"
    if not path.exists():
        raise FileNotFoundError(f"No adapter weights at {path}.")
    state = load_file(str(path), device=str(backbone.device))
    expected = set(_state_keys(backbone, adapter))
    got = set(state)
    if strict and expected != got:
        missing, extra = sorted(expected - got)[:5], sorted(got - expected)[:5]
        raise ValueError(
            f"Adapter {adapter!r} at {directory} does not match the policy's adapter (different "
            f"LoRA rank or target modules?): missing keys {missing}, unexpected keys {extra}."
        )
    with _no_grad():
        set_peft_model_state_dict(backbone.model, state, adapter_name=adapter)
    backbone.apply_trainable_flags()


def _state_keys(backbone: Any, adapter: str) -> list[str]:
    from peft.utils import get_peft_model_state_dict

    return list(get_peft_model_state_dict(backbone.model, adapter_name=adapter))


def _no_grad() -> Any:
    import torch

    return torch.no_grad()


def save_adapters(policy: MultiAgentPolicy, directory: str | Path) -> None:
    """Save every adapter of the policy (shared adapters once) plus ``policy.json``.

    Args:
        policy: The policy.
        directory: Output folder (created).
    """
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    for (base, adapter), _agents in policy.adapter_groups().items():
        save_one_adapter(policy.backbones[base], adapter, out / adapter)
    (out / ADAPTER_INDEX).write_text(json.dumps(policy_layout(policy), indent=2, sort_keys=True))


def load_adapters(policy: MultiAgentPolicy, directory: str | Path, *, strict: bool = True) -> None:
    """Load adapter weights written by :func:`save_adapters` into the policy's adapters.

    Args:
        policy: A policy with the same adapters (same names, LoRA settings and base models).
        directory: Folder written by :func:`save_adapters`.
        strict: Require every adapter of the policy to be present with exactly matching tensors.
    """
    root = Path(directory)
    for (base, adapter), _agents in policy.adapter_groups().items():
        folder = root / adapter
        if not folder.exists():
            if strict:
                raise FileNotFoundError(
                    f"Adapter {adapter!r} is missing from {root}; found "
                    f"{sorted(p.name for p in root.iterdir() if p.is_dir())}."
                )
            continue
        load_one_adapter(policy.backbones[base], adapter, folder, strict=strict)
