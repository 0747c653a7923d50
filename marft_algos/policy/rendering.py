"""Turn an env observation (a chat transcript) into the prompt token ids an agent's model reads.

Environments emit ``{"messages": [{"role": ..., "content": ...}, ...]}``; which special tokens wrap
each turn is a property of the model, so rendering happens here with the tokenizer's own chat
template (``tokenizer.apply_chat_template``). Tokenizers without a template (base models) get
:data:`FALLBACK_CHAT_TEMPLATE`, a plain ``System: ...`` / ``User: ...`` / ``Assistant:`` layout.

An observation that also holds ``"tools"`` (an agent program's call that offers tools) is rendered
with them, through the template's own tool support; messages keep their ``tool_calls``,
``tool_call_id`` and ``name`` fields. A template without tool support is refused by name
(:class:`ToolTemplateError`): marft never guesses a model's tool format.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "FALLBACK_CHAT_TEMPLATE",
    "ToolTemplateError",
    "as_messages",
    "fill_chat_template",
    "observation_tools",
    "render_prompt_ids",
    "render_prompt_text",
    "supports_tools",
]

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
        A list of ``{"role": str, "content": str}`` dicts (plus ``tool_calls``, ``tool_call_id``
        and ``name`` where a message has them; a missing content reads as "").
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
    return [_message(m) for m in messages]


_TOOL_FIELDS = ("tool_calls", "tool_call_id", "name")


def _message(m: Mapping[str, Any]) -> dict[str, Any]:
    content = m.get("content")
    out: dict[str, Any] = {
        "role": str(m["role"]),
        "content": "" if content is None else str(content),
    }
    out.update({k: m[k] for k in _TOOL_FIELDS if m.get(k) is not None})
    return out


class ToolTemplateError(ValueError):
    """An observation offers tools, and the agent's chat template cannot render them."""


def observation_tools(observation: Any) -> list[dict[str, Any]] | None:
    """The tools an observation offers (None when it offers none)."""
    tools = observation.get("tools") if isinstance(observation, Mapping) else None
    return [dict(t) for t in tools] if tools else None


def supports_tools(tokenizer: Any) -> bool:
    """Whether the tokenizer's chat template renders ``tools`` (it refers to them)."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, Mapping):
        return "tool_use" in template or any("tools" in str(t) for t in template.values())
    return isinstance(template, str) and "tools" in template


def _template_kwargs(tokenizer: Any, observation: Any = None) -> dict[str, Any]:
    tools = observation_tools(observation)
    if tools:
        if not supports_tools(tokenizer):
            names = [t.get("function", {}).get("name") for t in tools]
            raise ToolTemplateError(
                f"The call offers tools {names}, and this model's chat template does not render "
                f"tools. Use a model whose template does (e.g. Qwen2.5-Instruct), or register the "
                f"program with tool_prompt='hermes' so that the env describes the tools in the "
                f"system prompt and the replies' <tool_call> blocks are parsed."
            )
        return {"tools": tools}
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
        **_template_kwargs(tokenizer, messages),
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
        **_template_kwargs(tokenizer, messages),
    )
    # transformers 5 returns a BatchEncoding; older releases return the id list itself.
    if isinstance(out, Mapping) or hasattr(out, "keys"):
        out = out["input_ids"]
    return [int(i) for i in out]


def fill_chat_template(policy: Any, template: str | None) -> None:
    """Give the policy's tokenizers that have no chat template ``template`` (the user's
    ``--chat-template``, which a run records so that ``marft eval`` and ``marft serve`` render as
    training did). None: nothing changes."""
    if template is None:
        return
    for backbone in policy.backbones.values():
        if not getattr(backbone.tokenizer, "chat_template", None):
            backbone.tokenizer.chat_template = template
