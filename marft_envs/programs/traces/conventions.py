"""The conventions model-call spans are written in, read back to OpenAI-style chat messages.

Three, each the form a widely used instrumentation writes:

- **GenAI, newer** (semconv 1.37+): span attributes ``gen_ai.input.messages``,
  ``gen_ai.output.messages`` and ``gen_ai.system_instructions``, JSON lists of ``{"role", "parts":
  [{"type": "text", "content"}, ...]}`` (``opentelemetry-util-genai`` with
  ``OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental``); the same attributes on a
  ``gen_ai.client.inference.operation.details`` event are read too.
- **GenAI, older** (events): ``gen_ai.system.message``, ``gen_ai.user.message``,
  ``gen_ai.assistant.message``, ``gen_ai.tool.message`` and ``gen_ai.choice`` events, as log
  records tied to the span (what ``opentelemetry-instrumentation-openai-v2`` up to 2.1b0 emits
  with ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``) or as span events; the body
  (``{"content"}``, ``{"message": {...}}`` for a choice) or, on span events, a ``content``
  attribute (or a JSON ``gen_ai.event.content``).
- **OpenInference**: ``llm.input_messages.{i}.message.role`` / ``.message.content`` (or
  ``.message.contents.{j}.message_content.text``), likewise ``llm.output_messages``, on spans
  whose ``openinference.span.kind`` is ``LLM``; the model in ``llm.model_name``.

A span is a model call when ``gen_ai.operation.name`` is ``chat`` (or ``text_completion``,
``generate_content``) or its OpenInference kind is ``LLM``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from marft_envs.programs.traces.otlp import Span
from marft_envs.programs.traces.records import TraceFormatError, message_text

__all__ = ["CALL_OPERATIONS", "call_messages", "is_model_call", "recorded_model"]

#: ``gen_ai.operation.name`` values of a model call.
CALL_OPERATIONS = ("chat", "text_completion", "generate_content")

_ROLE_EVENTS = {
    "gen_ai.system.message": "system",
    "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
}
_DETAILS_EVENT = "gen_ai.client.inference.operation.details"
_OI_MESSAGE = re.compile(r"^llm\.(input|output)_messages\.(\d+)\.message\.(.+)$")
_OI_CONTENT = re.compile(r"^contents\.(\d+)\.message_content\.(type|text)$")
_NO_CONTENT = (
    "the span holds no message content: record it with message content on "
    "(OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true, or SPAN_ONLY with "
    "OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental), or give the file that holds its "
    "gen_ai.* log events too."
)


def is_model_call(span: Span) -> bool:
    """Whether ``span`` records one model call."""
    kind = span.attributes.get("openinference.span.kind")
    return span.attributes.get("gen_ai.operation.name") in CALL_OPERATIONS or kind == "LLM"


def recorded_model(span: Span) -> str | None:
    """The model a call asked for (``gen_ai.request.model``, ``llm.request.model_name``,
    ``llm.model_name``, ``gen_ai.response.model``)."""
    for key in (
        "gen_ai.request.model",
        "llm.request.model_name",
        "llm.model_name",
        "gen_ai.response.model",
    ):
        value = span.attributes.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def call_messages(span: Span) -> tuple[list[dict[str, Any]], dict[str, Any], str | None]:
    """A model call's ``(input messages, output message, finish reason)``.

    Raises:
        TraceFormatError: No message content, malformed message JSON, or no output message.
    """
    attrs = span.attributes
    for source in (attrs, *_details(span)):
        if "gen_ai.input.messages" in source or "gen_ai.output.messages" in source:
            return _newer(source, span)
    if any(_OI_MESSAGE.match(key) for key in attrs):
        return _openinference(span)
    events = [(e.name, _event_body(e.attributes), e.attributes) for e in span.events]
    events += [(e.name, e.body, e.attributes) for e in span.logs]
    if any(name in _ROLE_EVENTS or name == "gen_ai.choice" for name, _, _ in events):
        return _older(events, span)
    raise TraceFormatError(span.where, "gen_ai.input.messages", _NO_CONTENT)


def _details(span: Span) -> list[Mapping[str, Any]]:
    found = [e.attributes for e in span.events if e.name == _DETAILS_EVENT]
    return found + [e.attributes for e in span.logs if e.name == _DETAILS_EVENT]


def _json_list(value: Any, span: Span, name: str) -> list[Any]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as err:
            raise TraceFormatError(span.where, name, f"is not JSON ({err.msg}).") from None
    if not isinstance(value, list):
        raise TraceFormatError(span.where, name, f"must be a JSON list, got {value!r:.60}.")
    return value


def _parts_message(item: Any, span: Span, name: str) -> dict[str, Any]:
    """A GenAI ``{"role", "parts"}`` message as an OpenAI one."""
    if not isinstance(item, Mapping) or "role" not in item:
        raise TraceFormatError(
            span.where, name, f'each message must be {{"role", "parts"}}, got {item!r:.60}.'
        )
    message: dict[str, Any] = {"role": str(item["role"])}
    texts, calls = [], []
    for part in item.get("parts") or []:
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind == "text":
            texts.append(str(part.get("content", "")))
        elif kind == "tool_call":
            arguments = part.get("arguments")
            calls.append(
                {
                    "id": part.get("id"),
                    "type": "function",
                    "function": {
                        "name": part.get("name"),
                        "arguments": arguments
                        if isinstance(arguments, str)
                        else json.dumps(arguments),
                    },
                }
            )
        elif kind == "tool_call_response":
            message["tool_call_id"] = part.get("id")
            response = part.get("response")
            texts.append(response if isinstance(response, str) else json.dumps(response))
    message["content"] = "".join(texts)
    if calls:
        message["tool_calls"] = calls
    return message


def _newer(
    source: Mapping[str, Any], span: Span
) -> tuple[list[dict[str, Any]], dict[str, Any], str | None]:
    messages = [
        _parts_message(m, span, f"gen_ai.input.messages[{i}]")
        for i, m in enumerate(
            _json_list(source.get("gen_ai.input.messages", "[]"), span, "gen_ai.input.messages")
        )
    ]
    if "gen_ai.system_instructions" in source:
        parts = _json_list(source["gen_ai.system_instructions"], span, "gen_ai.system_instructions")
        system = _parts_message(
            {"role": "system", "parts": parts}, span, "gen_ai.system_instructions"
        )
        messages.insert(0, system)
    outputs = _json_list(source.get("gen_ai.output.messages", "[]"), span, "gen_ai.output.messages")
    if not outputs:
        raise TraceFormatError(
            span.where,
            "gen_ai.output.messages",
            "missing or empty: the call recorded no reply (it failed, or output capture was off).",
        )
    output = _parts_message(outputs[0], span, "gen_ai.output.messages[0]")
    reason = outputs[0].get("finish_reason") if isinstance(outputs[0], Mapping) else None
    if reason is None:
        reasons = span.attributes.get("gen_ai.response.finish_reasons")
        reason = reasons[0] if isinstance(reasons, list) and reasons else None
    return messages, output, reason


def _openinference(span: Span) -> tuple[list[dict[str, Any]], dict[str, Any], str | None]:
    found: dict[str, dict[int, dict[str, Any]]] = {"input": {}, "output": {}}
    for key, value in span.attributes.items():
        match = _OI_MESSAGE.match(key)
        if not match:
            continue
        side, index, rest = match.group(1), int(match.group(2)), match.group(3)
        message = found[side].setdefault(index, {})
        content = _OI_CONTENT.match(rest)
        if rest in ("role", "content", "name", "tool_call_id"):
            message[rest] = value
        elif content and content.group(2) == "text":
            message.setdefault("parts", {})[int(content.group(1))] = value
    messages = [
        _oi_message(found["input"][i], span, f"llm.input_messages.{i}")
        for i in sorted(found["input"])
    ]
    if not found["output"]:
        raise TraceFormatError(
            span.where,
            "llm.output_messages.0.message.content",
            "missing: the call recorded no reply (it failed, or output capture was off).",
        )
    output = _oi_message(found["output"][min(found["output"])], span, "llm.output_messages.0")
    reason = span.attributes.get("llm.finish_reason")
    return messages, output, reason if isinstance(reason, str) else None


def _oi_message(raw: dict[str, Any], span: Span, name: str) -> dict[str, Any]:
    if "role" not in raw:
        raise TraceFormatError(span.where, f"{name}.message.role", "missing.")
    parts = raw.pop("parts", None)
    if "content" not in raw:
        raw["content"] = "".join(str(parts[j]) for j in sorted(parts)) if parts else ""
    return {k: raw[k] for k in ("role", "content", "name", "tool_call_id") if k in raw}


def _event_body(attrs: Mapping[str, Any]) -> Any:
    """A span event's body: its ``content`` attribute, or a JSON body some bridges record."""
    for key in ("gen_ai.event.content", "body"):
        value = attrs.get(key)
        if isinstance(value, str):
            try:
                return json.loads(value)
            except json.JSONDecodeError:
                return {"content": value}
    return {
        k: v
        for k, v in attrs.items()
        if k in ("content", "message", "tool_calls", "id", "finish_reason", "index")
    }


def _older(
    events: Sequence[tuple[str, Any, Mapping[str, Any]]], span: Span
) -> tuple[list[dict[str, Any]], dict[str, Any], str | None]:
    messages: list[dict[str, Any]] = []
    choices: list[Mapping[str, Any]] = []
    for name, body, _ in events:
        body = body if isinstance(body, Mapping) else {}
        if name in _ROLE_EVENTS:
            message: dict[str, Any] = {"role": body.get("role", _ROLE_EVENTS[name])}
            text = message_text(body.get("content"))
            if text is None and "tool_calls" not in body:
                raise TraceFormatError(span.where, f"{name}.content", _NO_CONTENT)
            message["content"] = text or ""
            if "tool_calls" in body:
                message["tool_calls"] = body["tool_calls"]
            if name == "gen_ai.tool.message" and "id" in body:
                message["tool_call_id"] = body["id"]
            messages.append(message)
        elif name == "gen_ai.choice" and int(body.get("index", 0) or 0) == 0:
            choices.append(body)
    if not choices:
        raise TraceFormatError(
            span.where,
            "gen_ai.choice",
            "missing: the call recorded no reply "
            "(it failed, or its events are in a logs file not given).",
        )
    raw = choices[0].get("message") or choices[0]  # a span event may hold content directly
    text = message_text(raw.get("content")) if isinstance(raw, Mapping) else None
    if text is None and not (isinstance(raw, Mapping) and raw.get("tool_calls")):
        raise TraceFormatError(span.where, "gen_ai.choice.message.content", _NO_CONTENT)
    output: dict[str, Any] = {"role": "assistant", "content": text or ""}
    if isinstance(raw, Mapping) and raw.get("tool_calls"):
        output["tool_calls"] = raw["tool_calls"]
    reason = choices[0].get("finish_reason")
    return messages, output, reason if isinstance(reason, str) else None
