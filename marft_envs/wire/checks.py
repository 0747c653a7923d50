"""Checks of one chat-completions request: what marft can serve exactly, within its
:class:`~marft_envs.wire.protocol.RequestLimits`, as plain messages and tools.

What the request's sampling fields mean to a program's call: the trainer samples every rollout
with its own settings and evaluates greedily, so ``temperature``, ``top_p``, ``max_tokens``,
``stop``, ``seed`` and ``tool_choice`` are accepted and ignored there (:data:`IGNORED_FIELDS`),
and ``response_format`` is checked and not enforced (:mod:`marft_envs.wire.formats`);
``marft serve`` reads some of them (:func:`marft_algos.serving.request_settings`). Streaming and
``n > 1`` are refused with a clear error.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from marft_envs.wire.formats import check_output_format
from marft_envs.wire.protocol import RequestLimits, RequestRefused, UnknownAgentError

__all__ = [
    "IGNORED_FIELDS",
    "check_request",
    "check_request_size",
    "finite_number",
    "request_size",
]


#: Request fields accepted and ignored: the trainer's rollout settings decide how to sample.
IGNORED_FIELDS = frozenset(
    {
        "temperature",
        "top_p",
        "max_tokens",
        "max_completion_tokens",
        "stop",
        "seed",
        "presence_penalty",
        "frequency_penalty",
        "user",
        "metadata",
        "store",
        "logprobs",
        "top_logprobs",
        "timeout",
        "extra_headers",
        "extra_body",
        "parallel_tool_calls",
        "response_format",
        "tool_choice",
    }
)


def finite_number(value: Any) -> bool:
    """A real number (not a bool) that is finite as a float (a sampling field, a reward)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def _plain(value: Any) -> Any:
    """Dicts and lists all the way down (dataclasses and pydantic models included)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = asdict(value)
    elif hasattr(value, "model_dump"):
        value = value.model_dump(exclude_none=True)
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items() if v is not None}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _text(content: Any, where: str) -> str:
    """A message's text: a string, None (an assistant message that only calls tools), or a list
    of ``{"type": "text", "text": ...}`` parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(
        isinstance(p, Mapping) and p.get("type") == "text" and isinstance(p.get("text"), str)
        for p in content
    ):
        return "".join(p["text"] for p in content)
    raise TypeError(
        f"{where} must be text (or a list of text parts), got {type(content).__name__}: marft "
        f"renders text messages with the policy's chat template."
    )


def _tool_calls(calls: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(calls, list):
        raise TypeError(f"{where} must be a list of tool calls, got {calls!r:.80}.")
    out = []
    for k, call in enumerate(calls):
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
            raise TypeError(
                f"{where}[{k}] must be {{'id': ..., 'type': 'function', 'function': {{'name': ..., "
                f"'arguments': ...}}}}, got {call!r:.80}."
            )
        out.append(
            {
                "id": str(call.get("id", f"call_{k}")),
                "type": "function",
                "function": {
                    "name": function["name"],
                    "arguments": function.get("arguments", "{}"),
                },
            }
        )
    return out


def _tools(tools: Any) -> list[dict[str, Any]] | None:
    if not tools:
        return None
    if not isinstance(tools, list) or not all(
        isinstance(t, Mapping)
        and t.get("type", "function") == "function"
        and isinstance(t.get("function"), Mapping)
        and isinstance(t["function"].get("name"), str)
        for t in tools
    ):
        raise TypeError(
            f"tools must be a list of {{'type': 'function', 'function': {{'name': ..., "
            f"'description': ..., 'parameters': {{...}}}}}}, got {tools!r:.120}."
        )
    return [{"type": "function", "function": dict(t["function"])} for t in tools]


def check_request(
    agents: Sequence[str],
    model: Any,
    messages: Any,
    fields: Mapping[str, Any],
    limits: RequestLimits | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """Validate one chat-completions request; return its messages as plain dicts, and its tools.

    Raises:
        UnknownAgentError: ``model`` is not an agent of the team.
        RequestRefused: More messages than ``limits.max_messages``.
        ValueError / TypeError: A request marft cannot serve exactly (streaming, ``n > 1``,
            malformed messages or tools), with what to do instead.
    """
    if model not in agents:
        raise UnknownAgentError(
            f"model={model!r} is not an agent of this team; the agents are {list(agents)}. Name the "
            f"agent that speaks as the model (e.g. model={agents[0]!r})."
        )
    if fields.get("stream"):
        raise ValueError(
            "stream=True is not supported: marft trains on the ids it generated, and returns each "
            "message whole. Call without stream."
        )
    n = fields.get("n", 1)
    if n not in (None, 1):
        raise ValueError(
            f"n={n} is not supported: each call is one decision of one agent. Make n separate calls."
        )
    tools = _tools(_plain(fields.get("tools")))
    unknown = sorted(set(fields) - IGNORED_FIELDS - {"stream", "n", "tools"})
    if unknown:
        raise TypeError(f"create() got unexpected keyword argument(s) {unknown}.")
    if fields.get("response_format") is not None:  # checked, not enforced (wire.formats)
        check_output_format(_plain(fields["response_format"]), "response_format", str(model))
    if not isinstance(messages, Sequence) or isinstance(messages, str) or not messages:
        raise TypeError(
            f"messages must be a non-empty list of {{'role': ..., 'content': ...}} dicts, got "
            f"{messages!r:.80}."
        )
    if limits is not None and len(messages) > limits.max_messages:
        raise RequestRefused(
            f"the request has {len(messages)} messages, more than max_messages="
            f"{limits.max_messages}; send fewer, or raise max_messages where the program is "
            f"registered.",
            status=400,
            code="too_many_messages",
            kind="TooManyMessages",
        )
    plain = []
    for i, message in enumerate(messages):
        item = _plain(message)
        if not isinstance(item, Mapping) or "role" not in item:
            raise TypeError(
                f"messages[{i}] must be a dict with 'role' and 'content', got {message!r:.80}."
            )
        role = str(item["role"])
        entry: dict[str, Any] = {
            "role": role,
            "content": _text(item.get("content"), f"messages[{i}]['content']"),
        }
        if item.get("tool_calls"):
            entry["tool_calls"] = _tool_calls(item["tool_calls"], f"messages[{i}]['tool_calls']")
        if role == "tool":
            entry["tool_call_id"] = str(item.get("tool_call_id", ""))
        if isinstance(item.get("name"), str) and role == "tool":
            entry["name"] = item["name"]
        plain.append(entry)
    return plain, tools


def check_request_size(
    messages: Sequence[Mapping[str, Any]], tools: Sequence[Any] | None, limits: RequestLimits
) -> None:
    """Refuse a request whose messages and tools pass ``limits.max_request_bytes`` (counted as
    :func:`request_size` counts them; an endpoint bounds the body's bytes as it reads them).

    Raises:
        RequestRefused: The request is too large (413 ``request_too_large``).
    """
    size = request_size(messages, tools)
    if size > limits.max_request_bytes:
        raise RequestRefused(
            f"the request holds {size} characters, more than max_request_bytes="
            f"{limits.max_request_bytes}; send less, or raise max_request_bytes "
            f"where the program is registered.",
            status=413,
            code="request_too_large",
            kind="RequestTooLarge",
        )


def request_size(messages: Sequence[Mapping[str, Any]], tools: Sequence[Any] | None) -> int:
    """Characters of a request's message contents, tool calls and tools (what the in-process
    client bounds with ``max_request_bytes``)."""
    size = sum(len(m.get("content") or "") for m in messages)
    size += sum(len(repr(m["tool_calls"])) for m in messages if "tool_calls" in m)
    return size + (len(repr(tools)) if tools else 0)
