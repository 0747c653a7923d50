"""How each agent of a team acts: its base model, its adapter, and whether it trains."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["AgentSpec", "LoraSettings", "ModelLoadError"]


@dataclass(frozen=True)
class LoraSettings:
    """LoRA hyper-parameters of every adapter the policy creates (peft ``LoraConfig``).

    Attributes:
        r: LoRA rank.
        alpha: LoRA scaling numerator (``lora_alpha``); the update is scaled by ``alpha / r``.
        dropout: LoRA dropout. Default 0: the policy runs its models in eval mode so that rollout
            and update forward passes match exactly (see ``docs/policy.md``), so dropout would only
            act if you switch the model to train mode yourself.
        target_modules: Module names to adapt, or ``"all-linear"`` (every linear layer except the
            output head).
        init_lora_weights: peft's initialisation; ``True`` zero-initialises LoRA B, so a fresh
            adapter leaves the base model's outputs unchanged.
        extra: Further ``LoraConfig`` keyword arguments (e.g. ``{"use_rslora": True}``).
    """

    r: int = 8
    alpha: float = 16
    dropout: float = 0.0
    target_modules: str | Sequence[str] = "all-linear"
    init_lora_weights: bool | str = True
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.r < 1:
            raise ValueError(f"LoRA rank r must be >= 1, got {self.r}.")
        if not (math.isfinite(self.alpha) and self.alpha > 0):
            raise ValueError(
                f"LoRA alpha must be a finite number > 0, got {self.alpha} (the update is scaled by "
                f"alpha / r; e.g. 16)."
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"LoRA dropout must be in [0, 1), got {self.dropout}.")

    def to_peft(self) -> Any:
        """The equivalent ``peft.LoraConfig`` for a causal LM."""
        from peft import LoraConfig

        target = (
            self.target_modules
            if isinstance(self.target_modules, str)
            else list(self.target_modules)
        )
        # peft's stubs say int / a Literal list; it accepts any float alpha and init name it knows.
        settings: dict[str, Any] = {
            "lora_alpha": self.alpha,
            "init_lora_weights": self.init_lora_weights,
        }
        return LoraConfig(
            r=self.r,
            lora_dropout=self.dropout,
            target_modules=target,
            bias="none",
            task_type="CAUSAL_LM",
            **settings,
            **self.extra,
        )


@dataclass(frozen=True)
class AgentSpec:
    """How one agent acts.

    Attributes:
        model: Base model name or local path; None uses the policy's default base model. Agents
            naming different models are heterogeneous (own weights, tokenizer and chat template).
        adapter: LoRA adapter name. None means the agent's own adapter, named after the agent, if it
            is trainable or ``adapter_path`` is set, and no adapter at all (the plain base model)
            otherwise. Agents naming the same adapter on the same base share its parameters.
        trainable: Whether the agent's adapter trains. A frozen agent acts but its parameters are
            never returned by ``trainable_parameters`` and never require gradients.
        adapter_path: Initialise the adapter from a saved peft adapter folder instead of fresh LoRA
            weights (e.g. a previously fine-tuned agent kept frozen).
    """

    model: str | None = None
    adapter: str | None = None
    trainable: bool = True
    adapter_path: str | None = None

    def adapter_name(self, agent: str) -> str | None:
        """The adapter this agent acts with, or None for the plain base model."""
        if self.adapter is not None:
            return self.adapter
        if self.trainable or self.adapter_path is not None:
            return agent
        return None


class ModelLoadError(OSError):
    """A model name or path that does not lead to a loadable causal LM (says what to pass instead)."""
