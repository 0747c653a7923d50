"""The bound on a call's rendered prompt, checked before anything is generated.

A prompt may hold at most ``context length - reply budget`` tokens: the model reads the prompt
and then writes up to the agent's ``max_new_tokens`` into the same context. ``max_prompt_tokens``
(a program env's setting, ``marft serve --max-prompt-tokens``) may set a lower bound. A call past
the bound is refused with :class:`~marft_envs.wire.RequestRefused` (HTTP 400,
``context_length_exceeded``, counted as the program error ``PromptTooLong``) before it reaches
the policy, so an oversized call costs neither generation time nor memory.

Counting is the policy's business (its tokenizer and chat template): it hands a
:class:`PromptMeter` over, and :class:`PromptBudget` adds each agent's reply budget.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from marft_envs.wire.protocol import RequestRefused

__all__ = ["PromptBudget", "PromptMeter", "prompt_too_long"]


class PromptMeter(Protocol):
    """Counts the tokens of an agent's rendered prompt (the policy's tokenizer and template)."""

    def context_length(self, agent: str) -> int | None:
        """Tokens the agent's model reads and writes in one sequence (None: unknown)."""
        ...

    def measure(self, agent: str, observation: Any, limit: int) -> tuple[int, list[int] | None]:
        """``(tokens, ids)`` of the observation's rendered prompt; once the prompt is known to
        pass ``limit`` without tokenising it all, ``(a lower bound above limit, None)``."""
        ...


@dataclass(frozen=True)
class PromptBudget:
    """How long the prompts of a team's calls may be.

    Attributes:
        meter: Counts rendered prompts.
        reply_tokens: The reply budget (``max_new_tokens``) of each agent.
    """

    meter: PromptMeter
    reply_tokens: Callable[[str], int]

    def bound(self, agent: str, max_prompt_tokens: int | None = None) -> tuple[int, str] | None:
        """The agent's prompt bound and what sets it (None: no bound is known)."""
        bounds = []
        context = self.meter.context_length(agent)
        if context is not None:
            reply = self.reply_tokens(agent)
            bounds.append(
                (
                    max(context - reply, 0),
                    f"the model's context of {context} tokens less the agent's reply budget of "
                    f"{reply} tokens (max_new_tokens)",
                )
            )
        if max_prompt_tokens is not None:
            bounds.append((max_prompt_tokens, f"max_prompt_tokens={max_prompt_tokens}"))
        return min(bounds, key=lambda b: b[0]) if bounds else None

    def check(
        self, agent: str, observation: Any, max_prompt_tokens: int | None = None, fix: str = ""
    ) -> list[int] | None:
        """The prompt's ids (None when no bound is known: nothing was counted).

        Args:
            agent: The agent called.
            observation: What the policy renders for the call.
            max_prompt_tokens: A bound below the context's (None: the context's alone).
            fix: How the caller can get under the bound (ends the refusal's message).

        Raises:
            RequestRefused: The prompt passes the bound (400 ``context_length_exceeded``).
        """
        bound = self.bound(agent, max_prompt_tokens)
        if bound is None:
            return None
        limit, why = bound
        tokens, ids = self.meter.measure(agent, observation, limit)
        if tokens > limit:
            raise prompt_too_long(agent, tokens, ids is not None, limit, why, fix)
        return ids


def prompt_too_long(
    agent: str, tokens: int, exact: bool, limit: int, why: str, fix: str = ""
) -> RequestRefused:
    """The refusal of a prompt of ``tokens`` tokens (at least that many unless ``exact``) over
    ``limit``, which ``why`` explains; ``fix`` says how to get under it."""
    count = f"{tokens}" if exact else f"at least {tokens}"
    fix = fix or "send fewer or shorter messages"
    return RequestRefused(
        f"the rendered prompt of {agent!r} has {count} tokens, more than the {limit} allowed "
        f"({why}); {fix}.",
        status=400,
        code="context_length_exceeded",
        kind="PromptTooLong",
    )
