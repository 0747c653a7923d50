"""Settings of the supervised warm start (:class:`SFTConfig`), named as TRL's ``SFTConfig`` names
them where they mean the same thing (``learning_rate``, ``num_train_epochs``,
``per_device_train_batch_size``, ``gradient_accumulation_steps``, ``max_grad_norm``,
``max_length``, ``completion_only_loss``, ``packing``, ``seed``, ``output_dir``)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from marft_algos.protocols import GenerationSettings

__all__ = ["SFTConfig"]


@dataclass
class SFTConfig:
    """How :class:`~marft_algos.trainers.sft.SFTTrainer` fine-tunes each agent's adapter on its
    own replies in recorded transcripts (docs/training.md, "Warm starts (SFT)")."""

    output_dir: str | None = None
    """Run folder: config.json, metrics.jsonl and checkpoint-N/adapters (None: nothing is written)."""
    overwrite: bool = False
    """Replace an earlier run in output_dir."""
    learning_rate: float = 1e-4
    """Adam learning rate of every adapter (TRL's default is 2e-5 for full fine-tuning; its docs
    advise about 1e-4 for LoRA adapters, which marft trains)."""
    num_train_epochs: int = 3
    """Passes over the kept examples (TRL: 3)."""
    per_device_train_batch_size: int = 8
    """Examples (agent replies) per forward and backward pass (TRL: 8)."""
    gradient_accumulation_steps: int = 1
    """Passes whose gradients add up to one optimizer step (TRL: 1)."""
    max_grad_norm: float = 1.0
    """Gradient clipping per adapter (TRL: 1.0)."""
    adam_eps: float = 1e-8
    """Adam epsilon (TRL's adam_epsilon: 1e-8)."""
    max_length: int | None = 1024
    """Longest example (prompt + reply) in tokens; longer ones are left out and counted (TRL
    truncates them instead; marft never trains on a prompt its agent does not read). None: no limit."""
    completion_only_loss: bool = True
    """Loss on the agent's reply tokens only (every prompt token's label is -100), as TRL's
    completion_only_loss; False: on the prompt tokens too (all but the first)."""
    packing: bool = False
    """Packing several examples into one sequence: not supported (must stay False)."""
    seed: int = 0
    """Seeds the fresh adapters and the order of the examples in every epoch."""
    max_new_tokens: int = 512
    """Each agent's reply budget, as in marft train: a longer reply is cut at it, as a rollout
    would be (with no end-of-turn token). Use the RL run's values."""
    max_new_tokens_per_agent: dict[str, int] | None = None
    """Per-agent overrides of max_new_tokens, e.g. {"actor": 16}."""
    min_reward: float | None = None
    """Keep only episodes whose team reward is >= this (rejection sampling); None: keep all."""
    filter: str | None = None
    """A 'module:function' called with each Transcript; the episode is kept when it returns True
    (after min_reward). None: no such filter."""
    allow_held_out: bool = False
    """Train on episodes recorded in an evaluation too (a run's samples.jsonl, marft eval's JSON,
    trace episodes whose marft.split is not 'train'). Off: they are left out and counted, since
    a team tuned on its held-out problems can no longer be evaluated on them."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.learning_rate) and self.learning_rate > 0):
            raise ValueError(
                f"learning_rate={self.learning_rate}: must be a finite number > 0 (e.g. 1e-4)."
            )
        for name in (
            "num_train_epochs",
            "per_device_train_batch_size",
            "gradient_accumulation_steps",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r}: must be a whole number >= 1.")
        if not (math.isfinite(self.max_grad_norm) and self.max_grad_norm > 0):
            raise ValueError(f"max_grad_norm={self.max_grad_norm}: must be a finite number > 0.")
        if not (math.isfinite(self.adam_eps) and self.adam_eps > 0):
            raise ValueError(f"adam_eps={self.adam_eps}: must be a finite number > 0 (e.g. 1e-8).")
        if self.max_length is not None and self.max_length < 2:
            raise ValueError(
                f"max_length={self.max_length}: an example needs a prompt and a reply token; "
                f"pass 2 or more (e.g. 1024), or None for no limit."
            )
        if self.packing:
            raise ValueError(
                "packing=True is not supported: marft trains each example as its own row (the "
                "prompt it read, the reply it wrote); pass packing=False."
            )
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens={self.max_new_tokens}: must be >= 1.")
        for agent, cap in (self.max_new_tokens_per_agent or {}).items():
            if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
                raise ValueError(
                    f"max_new_tokens_per_agent[{agent!r}]={cap!r}: must be a whole number >= 1."
                )
        if self.min_reward is not None and not math.isfinite(self.min_reward):
            raise ValueError(f"min_reward={self.min_reward}: must be a finite number or None.")
        if self.filter is not None:
            module, _, function = self.filter.partition(":")
            if not module or not function:
                raise ValueError(
                    f"filter={self.filter!r}: name a function as 'module:function', e.g. "
                    f"'my_filters:solved_quickly'."
                )

    def generation(self) -> GenerationSettings:
        """The reply budgets as generation settings (:meth:`GenerationSettings.tokens_for`)."""
        return GenerationSettings(
            max_new_tokens=self.max_new_tokens,
            max_new_tokens_per_agent=dict(self.max_new_tokens_per_agent or {}),
        )

    def to_json(self) -> dict[str, Any]:
        """The config as written to config.json."""
        return dataclasses.asdict(self)
