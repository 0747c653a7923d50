"""Policy layer: LLM agents as LoRA adapters on shared base models, and a critic.

- :class:`MultiAgentPolicy` maps every env agent to a base model and adapter, samples actions in
  batches (token-in, token-out) and computes differentiable per-token log-probs.
- :class:`AgentSpec` / :class:`LoraSettings` configure per-agent, shared, heterogeneous and frozen
  agents.
- :class:`Critic` is a frozen backbone plus a small trainable value head (action- or token-level).
- :func:`~marft_algos.policy.adapters.save_adapters` / :func:`~marft_algos.policy.adapters.load_adapters`
  persist the adapters with the policy's layout; checkpoints (adapters, critic, optimizers, RNG)
  are a run-folder concept (:mod:`marft_algos.runs.checkpoint`).
- :func:`build_tiny_model` / :func:`tiny_model_path` build small local Qwen2 models for CPU runs.
"""

from __future__ import annotations

from marft_algos.policy.config import AgentSpec, LoraSettings
from marft_algos.policy.critic import Critic, ValueHead
from marft_algos.policy.multi_agent import Generation, MultiAgentPolicy, TokenLogProbs
from marft_algos.policy.rendering import render_prompt_ids, render_prompt_text
from marft_algos.policy.tiny import build_tiny_model, build_tiny_tokenizer, tiny_model_path

__all__ = [
    "AgentSpec",
    "Critic",
    "Generation",
    "LoraSettings",
    "MultiAgentPolicy",
    "TokenLogProbs",
    "ValueHead",
    "build_tiny_model",
    "build_tiny_tokenizer",
    "render_prompt_ids",
    "render_prompt_text",
    "tiny_model_path",
]
