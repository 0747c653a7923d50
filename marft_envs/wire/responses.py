"""The OpenAI Responses API (``POST /v1/responses``) on the chat-completions call path.

A Responses request is one decision of the agent named by ``model``, as a chat completion is:
:func:`responses_request` turns its ``instructions``, ``input`` and ``tools`` into the messages and
tools of a chat-completions call, which :func:`~marft_envs.wire.checks.check_request` then checks
like any other; the reply the policy generated becomes a ``Response`` object
(:func:`response_object`) whose ``output`` holds a ``message`` item with ``output_text`` content
and one ``function_call`` item per parsed tool call. The token ids trained on are the ones
generated, whichever API carried the call.

How the input maps (the ``openai`` package's input items):

- ``instructions`` -> a first ``system`` message; ``input`` as a string -> one ``user`` message;
- a ``message`` item (``role`` user, system, developer -> system, assistant) with text content
  (a string, or ``input_text`` / ``output_text`` parts) -> a message of that role;
- ``function_call`` items -> ``tool_calls`` of the assistant message they follow (``call_id`` is
  the tool call's id); ``function_call_output`` -> a ``tool`` message answering that ``call_id``;
- ``reasoning`` items are skipped (marft writes none); any other item (images, files, hosted
  tools, ``item_reference``) is refused with what is served.

Function tools (``{"type": "function", "name": ..., "parameters": ...}``) become chat tools with
the same fields in the order chat clients write them, so a call renders the same prompt through
either API. Marft keeps no state between calls: ``previous_response_id``, ``conversation`` and
``prompt`` are refused (send the whole input), ``background`` too. ``text.format`` (structured
outputs) is checked, repeated in the Response, and not enforced (:mod:`marft_envs.wire.formats`).

A reply cut at the agent's token budget is a ``completed`` response whose message item has
``status: "incomplete"``: the budget is part of the trained decision (a chat completion's
``finish_reason: "length"``), and the Agents SDK raises on an ``incomplete`` response, which would
turn every cut reply into a program error.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from marft_envs.wire.formats import check_text_config
from marft_envs.wire.protocol import Reply

__all__ = [
    "RESPONSES_IGNORED",
    "ResponsesRequest",
    "output_items",
    "response_object",
    "responses_request",
]

#: Fields of a Responses request accepted and ignored (the run's settings decide how to decode).
RESPONSES_IGNORED = frozenset(
    {
        "include",
        "store",
        "metadata",
        "parallel_tool_calls",
        "tool_choice",
        "truncation",
        "reasoning",
        "text",
        "user",
        "prompt_cache_key",
        "prompt_cache_retention",
        "prompt_cache_options",
        "safety_identifier",
        "service_tier",
        "top_logprobs",
        "stream_options",
        "context_management",
        "max_tool_calls",
    }
)

#: Fields refused when set: each needs state or a feature marft does not keep.
_STATEFUL = {
    "previous_response_id": "marft keeps no responses between calls; send the whole input",
    "conversation": "marft keeps no conversations; send the whole input",
    "prompt": "marft has no stored prompts; send instructions and input",
    "background": "marft answers each call while the request waits; call without background",
}

#: Fields passed on to the chat-completions call (the sampling fields ``marft serve`` reads).
_SAMPLING = {"temperature": "temperature", "top_p": "top_p", "max_output_tokens": "max_tokens"}

_ROLES = {"user": "user", "system": "system", "developer": "system", "assistant": "assistant"}
_TEXT_PARTS = frozenset({"input_text", "output_text", "text"})


@dataclass
class ResponsesRequest:
    """A Responses request as a chat-completions call.

    Attributes:
        model: The ``model`` field (the agent), unchecked.
        messages: The chat messages (plain dicts).
        fields: The chat-completions fields: ``tools`` and the sampling fields.
        stream: Whether the client asked for server-sent events.
        echo: What a Response object repeats of its request (instructions, tools, ...).
    """

    model: Any
    messages: list[dict[str, Any]]
    fields: dict[str, Any]
    stream: bool = False
    echo: dict[str, Any] = field(default_factory=dict)


def _text(content: Any, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for k, part in enumerate(content):
            if not isinstance(part, Mapping) or part.get("type") not in _TEXT_PARTS:
                kind = part.get("type") if isinstance(part, Mapping) else type(part).__name__
                raise TypeError(
                    f"{where}[{k}] is a {kind!r} part; marft renders text with the policy's chat "
                    f"template: send input_text (or output_text) parts."
                )
            parts.append(str(part.get("text") or ""))
        return "".join(parts)
    raise TypeError(f"{where} must be text or a list of input_text parts, got {content!r:.80}.")


def _function_tool(tool: Any, k: int) -> dict[str, Any]:
    if not isinstance(tool, Mapping) or tool.get("type") != "function" or not tool.get("name"):
        kind = tool.get("type") if isinstance(tool, Mapping) else type(tool).__name__
        raise TypeError(
            f"tools[{k}] is a {kind!r} tool; marft serves function tools only "
            f"({{'type': 'function', 'name': ..., 'description': ..., 'parameters': {{...}}}})."
        )
    function = {name: tool[name] for name in ("name", "description", "parameters") if name in tool}
    function.update({key: v for key, v in tool.items() if key not in function and key != "type"})
    return {"type": "function", "function": function}


def _input_messages(items: Any) -> list[dict[str, Any]]:
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    if not isinstance(items, list):
        raise TypeError(f"input must be text or a list of input items, got {items!r:.80}.")
    out: list[dict[str, Any]] = []
    for i, item in enumerate(items):
        where = f"input[{i}]"
        if not isinstance(item, Mapping):
            raise TypeError(f"{where} must be an input item (a JSON object), got {item!r:.80}.")
        kind = item.get("type", "message")
        if kind == "message":
            role = _ROLES.get(str(item.get("role")))
            if role is None:
                raise TypeError(
                    f"{where} has role {item.get('role')!r}; the roles are {sorted(_ROLES)}."
                )
            out.append({"role": role, "content": _text(item.get("content"), f"{where}.content")})
        elif kind == "function_call":
            call = {
                "id": str(item.get("call_id") or item.get("id") or f"call_{i}"),
                "type": "function",
                "function": {"name": item.get("name"), "arguments": item.get("arguments") or "{}"},
            }
            if out and out[-1]["role"] == "assistant":
                out[-1].setdefault("tool_calls", []).append(call)
            else:
                out.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif kind == "function_call_output":
            output = _text(item.get("output"), f"{where}.output")
            out.append(
                {"role": "tool", "tool_call_id": str(item.get("call_id")), "content": output}
            )
        elif kind == "reasoning":
            continue
        else:
            raise TypeError(
                f"{where} is a {kind!r} item; marft serves message, function_call and "
                f"function_call_output items (text only, the whole conversation in each request)."
            )
    return out


def responses_request(body: Mapping[str, Any]) -> ResponsesRequest:
    """The chat-completions call of a ``POST /v1/responses`` body.

    Raises:
        ValueError: A field that needs state marft does not keep (``previous_response_id``, ...).
        TypeError: Input or tools marft cannot render (not text, not function tools), or an
            unknown field; each message says what is served.
    """
    for name, why in _STATEFUL.items():
        if body.get(name):
            raise ValueError(f"{name} is not supported: {why}.")
    known = {"model", "input", "instructions", "tools", "stream", *_STATEFUL, *_SAMPLING}
    unknown = sorted(set(body) - known - RESPONSES_IGNORED)
    if unknown:
        raise TypeError(f"responses.create() got unexpected keyword argument(s) {unknown}.")
    messages = _input_messages(body.get("input"))
    instructions = body.get("instructions")
    if instructions:
        messages.insert(0, {"role": "system", "content": _text(instructions, "instructions")})
    tools = body.get("tools") or []
    if not isinstance(tools, list):
        raise TypeError(f"tools must be a list of function tools, got {tools!r:.80}.")
    fields: dict[str, Any] = {
        chat: body[name] for name, chat in _SAMPLING.items() if body.get(name) is not None
    }
    if tools:
        fields["tools"] = [_function_tool(tool, k) for k, tool in enumerate(tools)]
    text = check_text_config(body.get("text"), str(body.get("model")))  # not enforced
    echo = {
        "text": text or {"format": {"type": "text"}},
        "instructions": instructions,
        "tools": tools,
        "tool_choice": body.get("tool_choice") or "auto",
        "parallel_tool_calls": body.get("parallel_tool_calls", True) is not False,
        "temperature": body.get("temperature"),
        "top_p": body.get("top_p"),
        "max_output_tokens": body.get("max_output_tokens"),
        "metadata": body.get("metadata") or {},
    }
    return ResponsesRequest(body.get("model"), messages, fields, bool(body.get("stream")), echo)


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def output_items(reply: Reply) -> list[dict[str, Any]]:
    """The ``output`` of a Response: a ``message`` item with the reply's text (none when the
    reply only calls tools) and a ``function_call`` item per tool call."""
    items: list[dict[str, Any]] = []
    text = reply.content if reply.tool_calls else reply.text
    if text or not reply.tool_calls:
        content = [{"type": "output_text", "text": text or "", "annotations": [], "logprobs": []}]
        status = "completed" if reply.finished or reply.tool_calls else "incomplete"
        items.append(
            {
                "id": _id("msg"),
                "type": "message",
                "role": "assistant",
                "status": status,
                "content": content,
            }
        )
    for call in reply.tool_calls:
        items.append(
            {
                "id": _id("fc"),
                "type": "function_call",
                "call_id": call.id,
                "name": call.function.name,
                "arguments": call.function.arguments,
                "status": "completed",
            }
        )
    return items


def response_object(
    agent: str,
    reply: Reply | None,
    echo: Mapping[str, Any],
    *,
    response_id: str | None = None,
    created_at: int | None = None,
) -> dict[str, Any]:
    """The Response object of one call (``reply=None``: the in-progress snapshot a stream opens
    with, no output and no usage)."""
    usage = None
    if reply is not None:
        usage = {
            "input_tokens": reply.prompt_tokens,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": reply.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": reply.prompt_tokens + reply.completion_tokens,
        }
    return {
        "id": response_id or _id("resp"),
        "object": "response",
        "created_at": int(time.time()) if created_at is None else created_at,
        "model": agent,
        "status": "in_progress" if reply is None else "completed",
        "error": None,
        "incomplete_details": None,
        "output": [] if reply is None else output_items(reply),
        "usage": usage,
        "text": {"format": {"type": "text"}},
        **echo,
    }
