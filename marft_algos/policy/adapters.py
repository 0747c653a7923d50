"""Saving and loading a policy's adapters in standard peft format.

Layout written by :func:`save_adapters`::

    directory/
        policy.json                  # agents -> (base model, adapter, trainable)
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
    """JSON description of which base model and adapter each agent uses."""
    return {
        "agents": {
            agent: {
                "base_model": policy.base_model_name(agent),
                "adapter": policy.adapter_name(agent),
                "trainable": policy.is_trainable(agent),
            }
            for agent in policy.agents
        },
        "adapters": {
            adapter: {"base_model": base, "agents": agents}
            for (base, adapter), agents in policy.adapter_groups().items()
        },
    }


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
