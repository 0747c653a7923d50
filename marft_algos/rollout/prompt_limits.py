"""Prompt bounds for envs that take calls (agent programs): a collector hands them its policy's
:class:`~marft_envs.wire.prompts.PromptBudget`, so that a call whose rendered prompt passes the
model's context less the agent's reply budget (or ``max_prompt_tokens``) is refused before it
is generated, and its episode fails as ``PromptTooLong``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from marft_algos.protocols import GenerationSettings
from marft_envs.wire.prompts import PromptBudget

__all__ = ["limit_prompts"]


def limit_prompts(envs: Sequence[Any], policy: Any, settings: GenerationSettings) -> None:
    """Call ``limit_prompts(budget)`` on the envs that have it, with ``policy``'s budget under
    ``settings``' reply budgets (None when the policy has no tokenizers to count with)."""
    hooks = [getattr(env, "limit_prompts", None) for env in envs]
    if not any(hooks):
        return
    # Only envs that take calls need the tokenizers (the policy package loads transformers).
    from marft_algos.policy.prompt_length import policy_meter

    meter = policy_meter(policy)
    budget = None if meter is None else PromptBudget(meter, settings.tokens_for)
    for hook in hooks:
        if hook is not None:
            hook(budget)
