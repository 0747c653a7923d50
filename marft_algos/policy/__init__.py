"""Policy layer: LLM agents as LoRA adapters on shared base models, a critic, and checkpoints.

- :class:`MultiAgentPolicy` maps every env agent to a base model and adapter, samples actions in
  batches (token-in, token-out) and computes differentiable per-token log-probs.
- :class:`AgentSpec` / :class:`LoraSettings` configure per-agent, shared, heterogeneous and frozen
  agents.
- :class:`Critic` is a frozen backbone plus a small trainable value head (action- or token-level).
- :func:`save_checkpoint` / :func:`load_checkpoint` persist adapters, critic, optimizers, RNG and
  user state atomically.
- :func:`build_tiny_model` / :func:`tiny_model_path` build small local Qwen2 models for CPU runs.
"""

from __future__ import annotations

from marft_algos.policy.checkpoint import (
    CheckpointError,
    CorruptCheckpointError,
    load_checkpoint,
    newest_valid_checkpoint,
    read_manifest,
    save_checkpoint,
    verify_checkpoint,
)
from marft_algos.policy.config import AgentSpec, LoraSettings
from marft_algos.policy.critic import Critic, ValueHead
from marft_algos.policy.multi_agent import Generation, MultiAgentPolicy, TokenLogProbs
from marft_algos.policy.rendering import render_prompt_ids, render_prompt_text
from marft_algos.policy.tiny import build_tiny_model, build_tiny_tokenizer, tiny_model_path

__all__ = [
    "AgentSpec",
    "CheckpointError",
    "CorruptCheckpointError",
    "Critic",
    "Generation",
    "LoraSettings",
    "MultiAgentPolicy",
    "TokenLogProbs",
    "ValueHead",
    "build_tiny_model",
    "build_tiny_tokenizer",
    "load_checkpoint",
    "newest_valid_checkpoint",
    "read_manifest",
    "render_prompt_ids",
    "render_prompt_text",
    "save_checkpoint",
    "tiny_model_path",
    "verify_checkpoint",
]
