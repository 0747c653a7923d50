"""Turn an env observation (a chat transcript) into the prompt token ids an agent's model reads.

Environments emit ``{"messages": [{"role": ..., "content": ...}, ...]}``; which special tokens wrap
each turn is a property of the model, so rendering happens here with the tokenizer's own chat
template (``tokenizer.apply_chat_template``). Tokenizers without a template (base models) get
:data:`FALLBACK_CHAT_TEMPLATE`, a plain ``System: ...`` / ``User: ...`` / ``Assistant:`` layout.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["FALLBACK_CHAT_TEMPLATE", "as_messages", "render_prompt_ids", "render_prompt_text"]

#: Used when a tokenizer has no ``chat_template``: plain role-prefixed lines, then ``Assistant:``.
FALLBACK_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ message['role'] | capitalize }}: {{ message['content'] }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}Assistant:{% endif %}"
)


def as_messages(observation: Sequence[Mapping[str, Any]] | Mapping[str, Any] | str) -> list[dict]:
    """Normalise an observation to a list of chat messages.

    Args:
        observation: A message list, an env observation ``{"messages": [...]}``, or plain text
            (treated as one user message).

    Returns:
        A list of ``{"role": str, "content": str}`` dicts.
    """
    if isinstance(observation, str):
        return [{"role": "user", "content": observation}]
    messages: Sequence[Mapping[str, Any]]
    if isinstance(observation, Mapping):
        if "messages" not in observation:
            raise ValueError(
                f"An observation mapping must hold 'messages' (a chat transcript); got keys "
                f"{sorted(observation)}."
            )
        messages = observation["messages"]
    else:
        messages = observation
    return [{"role": str(m["role"]), "content": str(m["content"])} for m in messages]


def _template_kwargs(tokenizer: Any) -> dict[str, Any]:
    if getattr(tokenizer, "chat_template", None):
        return {}
    return {"chat_template": FALLBACK_CHAT_TEMPLATE}


def render_prompt_text(
    tokenizer: Any, messages: Sequence[Mapping[str, Any]] | Mapping[str, Any] | str
) -> str:
    """The prompt as text, with the generation prompt opened (for logging and debugging).

    Args:
        tokenizer: A transformers tokenizer.
        messages: Chat messages, an env observation, or plain text (see :func:`as_messages`).

    Returns:
        The rendered prompt string.
    """
    return tokenizer.apply_chat_template(
        as_messages(messages),
        add_generation_prompt=True,
        tokenize=False,
        **_template_kwargs(tokenizer),
    )


def render_prompt_ids(
    tokenizer: Any, messages: Sequence[Mapping[str, Any]] | Mapping[str, Any] | str
) -> list[int]:
    """Token ids of the prompt an agent reads, with the assistant turn opened.

    Uses ``tokenizer.apply_chat_template(messages, add_generation_prompt=True)``; tokenizers without
    a chat template use :data:`FALLBACK_CHAT_TEMPLATE`.

    Args:
        tokenizer: A transformers tokenizer.
        messages: Chat messages, an env observation, or plain text (see :func:`as_messages`).

    Returns:
        The prompt token ids.
    """
    out = tokenizer.apply_chat_template(
        as_messages(messages),
        add_generation_prompt=True,
        tokenize=True,
        **_template_kwargs(tokenizer),
    )
    # transformers 5 returns a BatchEncoding; older releases return the id list itself.
    if isinstance(out, Mapping) or hasattr(out, "keys"):
        out = out["input_ids"]
    return [int(i) for i in out]
