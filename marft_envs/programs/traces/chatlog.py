"""Plain JSON-lines chat logs: one record a line, OpenAI style.

A record is ``{"messages": [{"role", "content"}, ...]}`` with, optionally, the agent that
answered (``agent``, ``name`` or ``model``), the episode it belongs to (``episode``,
``episode_id``, ``conversation_id``, ``conversation``, ``session_id`` or ``trace_id``) and the
reply (``output``, ``response`` or ``completion``: a string, a message, or an OpenAI chat
completion with ``choices``). :class:`ChatLogFields` renames any of them.

A record is one call or one whole conversation:

- with a reply field, it is one call: ``messages`` in, the reply out;
- without one, each ``assistant`` message is a call, the messages before it its input. A call
  already seen in the same episode (same input, same reply) is not counted again, so a log of
  one record per call, each holding the history so far, reads the same as one record per
  conversation.

Records with the same episode field form one episode, in file order; a record without one is an
episode of its own.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from marft_envs.programs.traces.records import (
    AgentNames,
    RecordedCall,
    RecordedTrace,
    TraceFormatError,
    agent_name,
    message_text,
)

__all__ = ["DEFAULT_AGENT", "ChatLogFields", "is_chat_record", "read_chat_log"]

#: The agent of a record that names none (map it with ``agents={"assistant": ...}``).
DEFAULT_AGENT = "assistant"


@dataclass
class ChatLogFields:
    """The field names of a chat log's records (the first one present is used)."""

    messages: str = "messages"
    """The list of chat messages."""
    agent: tuple[str, ...] = ("agent", "name", "model")
    """The agent that answered; a record with none is :data:`DEFAULT_AGENT`'s."""
    episode: tuple[str, ...] = (
        "episode",
        "episode_id",
        "conversation_id",
        "conversation",
        "session_id",
        "trace_id",
    )
    """The episode (conversation) the record belongs to; grouping only, never part of a task."""
    output: tuple[str, ...] = ("output", "response", "completion")
    """The reply, when the record is one call whose messages hold only its input."""

    def __post_init__(self) -> None:
        for name in ("agent", "episode", "output"):
            value = getattr(self, name)
            if isinstance(value, str):
                setattr(self, name, (value,))
            elif not all(isinstance(v, str) for v in value):
                raise TypeError(f"ChatLogFields.{name} must be field names, got {value!r}.")
        if not isinstance(self.messages, str) or not self.messages:
            raise TypeError(f"ChatLogFields.messages must be a field name, got {self.messages!r}.")


def is_chat_record(record: Any, fields: ChatLogFields) -> bool:
    """Whether a decoded JSON line is a chat-log record."""
    return isinstance(record, Mapping) and fields.messages in record


def _first(record: Mapping[str, Any], names: tuple[str, ...]) -> tuple[str | None, Any]:
    for name in names:
        if record.get(name) not in (None, ""):
            return name, record[name]
    return None, None


def _message(raw: Any, where: str, name: str) -> dict[str, Any]:
    if not isinstance(raw, Mapping) or not isinstance(raw.get("role"), str):
        raise TraceFormatError(
            where, name, f'must be a message {{"role", "content"}}, got {raw!r:.60}.'
        )
    content = raw.get("content")
    text = message_text(content)
    if text is None and content is not None:
        raise TraceFormatError(
            where, f"{name}.content", f"must be text or a list of text parts, got {content!r:.60}."
        )
    if text is None and not raw.get("tool_calls"):
        raise TraceFormatError(where, f"{name}.content", "missing (and no tool_calls).")
    message: dict[str, Any] = {"role": raw["role"], "content": text or ""}
    for key in ("name", "tool_calls", "tool_call_id"):
        if raw.get(key) is not None:
            message[key] = raw[key]
    return message


def _reply(raw: Any, where: str, name: str) -> dict[str, Any]:
    if isinstance(raw, str):
        return {"role": "assistant", "content": raw}
    if isinstance(raw, Mapping) and isinstance(raw.get("choices"), list) and raw["choices"]:
        return _message(raw["choices"][0].get("message"), where, f"{name}.choices[0].message")
    return _message(raw, where, name)


def record_calls(
    record: Mapping[str, Any], where: str, fields: ChatLogFields, agents: AgentNames
) -> list[RecordedCall]:
    """The calls one record holds."""
    raw = record.get(fields.messages)
    if not isinstance(raw, list):
        raise TraceFormatError(
            where, fields.messages, f"must be a list of messages, got {type(raw).__name__}."
        )
    messages = [_message(m, where, f"{fields.messages}[{i}]") for i, m in enumerate(raw)]
    found, name = _first(record, fields.agent)
    agent = agent_name(str(name) if found else DEFAULT_AGENT, agents)
    model = str(record["model"]) if record.get("model") else None
    output_field, reply = _first(record, fields.output)
    if output_field is not None:
        return [
            RecordedCall(agent, messages, _reply(reply, where, output_field), model, None, where)
        ]
    calls = [
        RecordedCall(agent, messages[:i], message, model, None, where)
        for i, message in enumerate(messages)
        if message["role"] == "assistant" and i > 0
    ]
    if not calls:
        raise TraceFormatError(
            where,
            fields.messages,
            f"holds no assistant reply after an input, "
            f"and the record has no reply field ({', '.join(fields.output)}); "
            f"a record is one call or one conversation.",
        )
    return calls


def _read_calls(fields: ChatLogFields, agents: AgentNames):  # type: ignore[no-untyped-def]
    def read(trace: RecordedTrace) -> list[RecordedCall]:
        seen: set[str] = set()
        calls = []
        for record, where in zip(trace.records, trace.record_where, strict=True):
            for call in record_calls(record, where, fields, agents):
                key = json.dumps([call.messages, call.output], sort_keys=True)
                if key not in seen:
                    seen.add(key)
                    calls.append(call)
        return calls

    return read


def read_chat_log(
    path: Path, fields: ChatLogFields, agents: AgentNames = None
) -> list[RecordedTrace]:
    """The episodes of one JSON-lines chat log, in the order they first appear."""
    episodes: dict[str, RecordedTrace] = {}
    reader = _read_calls(fields, agents)
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise TraceFormatError(
                where,
                "",
                f"not JSON ({err.msg} at column {err.colno}); a "
                f"chat log holds one JSON record a line.",
            ) from None
        if not is_chat_record(record, fields):
            keys = sorted(record)[:6] if isinstance(record, Mapping) else type(record).__name__
            raise TraceFormatError(
                where,
                fields.messages,
                f"missing (found {keys}); name the "
                f"record's fields with ChatLogFields, or give OTLP files and "
                f"chat logs separately.",
            )
        found, episode = _first(record, fields.episode)
        key = f"{found}={episode}" if found else where
        if key not in episodes:
            episodes[key] = RecordedTrace(
                episode=str(episode) if found else where,
                where=where,
                read_calls=reader,
                messages_field=fields.messages,
            )
        episodes[key].records.append(record)
        episodes[key].record_where.append(where)
    return list(episodes.values())
