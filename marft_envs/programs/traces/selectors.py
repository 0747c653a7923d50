"""Which span or field of a recorded episode holds its task input (``load_trace_tasks(task=...)``).

A selector is one of:

- ``"first_user_message"`` (the default): the first user message of the episode's first model
  call;
- ``"root:ATTRIBUTE"``: an attribute of the trace's root span (OTLP), e.g. ``"root:input.value"``;
- ``"span:NAME:ATTRIBUTE"``: an attribute of the first span named ``NAME``;
- ``"record:PATH"``: a field of the episode's first chat-log record that has it, by a dotted and
  indexed path: ``"record:metadata.ticket"``, ``"record:messages[1].content"``;
- a function of the :class:`~marft_envs.programs.traces.RecordedTrace`: whatever it returns
  (None: the trace has no task);
- a mapping ``{"key": selector, ...}``: a dict task, one key a selector.

``root:`` and ``span:`` take ``#PATH`` after the attribute to read into an attribute that holds
JSON: ``"root:input.value#ticket.text"``. A task is the selected value and nothing else: no
trace, span or conversation id, no timestamp; a string selector that names an id or time field
(``id``, ``*_id``, ``*.id``, ``timestamp``, ``created``...) is refused.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from marft_envs.programs.traces.records import RecordedTrace, TraceFormatError, message_text

__all__ = ["Selector", "check_selector", "select"]

Selector = str | Callable[[RecordedTrace], Any] | Mapping[str, Any]

_STEP = re.compile(r"([^.\[\]]+)|\[(\d+)\]")
_TIME_FIELDS = {"id", "timestamp", "time", "created"}
_FORMS = "'first_user_message', 'root:ATTRIBUTE', 'span:NAME:ATTRIBUTE', 'record:PATH'"


class _Missing(Exception):
    """The selected field is absent; carries the one-line reason."""

    def __init__(self, where: str, field: str, problem: str) -> None:
        super().__init__(problem)
        self.error = TraceFormatError(where, field, problem)


def _refuse_ids(name: str, selector: str) -> None:
    last = re.split(r"[.\[\]#]", name.rstrip("]"))[-1]
    low = last.lower()
    if (
        low in _TIME_FIELDS
        or low.endswith(("_id", "_at", "_time", "unixnano"))
        or last.endswith("Id")
    ):
        raise ValueError(
            f"task={selector!r} selects {name!r}, an id or a time: ids and timestamps are never "
            f"trained on; select the task's text, or pass a function if this field is content."
        )


def check_selector(selector: Any) -> None:
    """Refuse a malformed selector before any file is read.

    Raises:
        ValueError: An unknown form, or one that selects an id or a timestamp.
        TypeError: Not a string, function or mapping.
    """
    if callable(selector):
        return
    if isinstance(selector, Mapping):
        for value in selector.values():
            check_selector(value)
        return
    if not isinstance(selector, str):
        raise TypeError(
            f"task={selector!r:.60} is not a selector; pass one of {_FORMS}, a "
            f"function of the trace, or a dict of them."
        )
    if selector == "first_user_message":
        return
    kind, _, rest = selector.partition(":")
    parts = rest.rsplit(":", 1) if kind == "span" else [rest]
    if (
        kind not in ("root", "span", "record")
        or not all(parts)
        or (kind == "span" and len(parts) != 2)
    ):
        raise ValueError(
            f"task={selector!r} is not a selector; pass one of {_FORMS}, a function "
            f"of the trace, or a dict of them."
        )
    _refuse_ids(parts[-1], selector)


def walk(value: Any, path: str, where: str, field: str) -> Any:
    """``value`` followed along a dotted and indexed ``path`` (``a.b[2].c``)."""
    for step in _STEP.finditer(path):
        key, index = step.group(1), step.group(2)
        if index is not None:
            if not isinstance(value, list) or int(index) >= len(value):
                raise _Missing(where, field, f"has no item [{index}] on the way to {path!r}.")
            value = value[int(index)]
        elif isinstance(value, Mapping) and key in value:
            value = value[key]
        else:
            have = (
                f" (it has: {', '.join(sorted(map(str, value))[:8])})"
                if isinstance(value, Mapping)
                else ""
            )
            raise _Missing(where, field, f"has no field {key!r} on the way to {path!r}{have}.")
    return value


def _attribute(span: Any, spec: str) -> Any:
    name, _, path = spec.partition("#")
    if name not in span.attributes:
        have = ", ".join(sorted(span.attributes)[:8])
        raise _Missing(
            span.where,
            name,
            f"missing on span {span.name!r} (it has: {have}); select another attribute with task=.",
        )
    value = span.attributes[name]
    if not path:
        return value
    try:
        data = json.loads(value) if isinstance(value, str) else value
    except json.JSONDecodeError:
        raise _Missing(
            span.where, name, f"is not JSON, so {path!r} cannot be read in it."
        ) from None
    return walk(data, path, span.where, f"{name}#{path}")


def _first_logged_user_message(trace: RecordedTrace) -> Any:
    """A chat log's first user message, read from its records (a log of requests without replies
    holds tasks too)."""
    for record, where in zip(trace.records, trace.record_where, strict=True):
        messages = record.get(trace.messages_field)
        if not isinstance(messages, list):
            raise TraceFormatError(where, trace.messages_field, "must be a list of messages.")
        for message in messages:
            if isinstance(message, Mapping) and message.get("role") == "user":
                text = message_text(message.get("content"))
                if text is None:
                    raise TraceFormatError(
                        where,
                        f"{trace.messages_field}.content",
                        "the first user message holds no text; select another field with task=.",
                    )
                return text
    raise _Missing(
        trace.where,
        trace.messages_field,
        "no user message in the episode's records; select another field with task=.",
    )


def _select(trace: RecordedTrace, selector: Any) -> Any:
    if callable(selector):
        return selector(trace)
    if isinstance(selector, Mapping):
        return {key: _select(trace, value) for key, value in selector.items()}
    if selector == "first_user_message" and trace.records:
        return _first_logged_user_message(trace)
    if selector == "first_user_message":
        if not trace.calls:
            raise _Missing(
                trace.where,
                "model call",
                f"trace {trace.episode[:8]}… records no model "
                f"call; select a span attribute or a record field with task=.",
            )
        call = trace.calls[0]
        for message in call.messages:
            if message["role"] == "user":
                return message["content"]
        raise _Missing(
            call.where,
            "messages",
            "the first model call has no user message; select another field with task=.",
        )
    kind, _, rest = selector.partition(":")
    if kind == "root":
        return _attribute(trace.root(), rest)
    if kind == "span":
        name, spec = rest.rsplit(":", 1)
        spans = [s for s in sorted(trace.spans, key=lambda s: s.start) if s.name == name]
        if not spans:
            names = ", ".join(sorted({repr(s.name) for s in trace.spans})[:8])
            raise _Missing(
                trace.where,
                name,
                f"no span of trace {trace.episode[:8]}… is named {name!r} (its spans: {names}).",
            )
        return _attribute(spans[0], spec)
    if not trace.records:
        raise TraceFormatError(
            trace.where,
            rest,
            "record: selects a chat-log field, and this is "
            "an OTLP trace; use task='root:ATTRIBUTE' or 'span:NAME:ATTRIBUTE'.",
        )
    first: _Missing | None = None
    for record, where in zip(trace.records, trace.record_where, strict=True):
        try:
            return walk(record, rest, where, rest)
        except _Missing as missing:
            first = first or missing
    assert first is not None
    raise first


def select(trace: RecordedTrace, selector: Selector) -> Any:
    """The task ``selector`` picks from ``trace``, or None when a field it needs is missing and
    the caller may skip it (:class:`TraceFormatError` for what is malformed).

    Raises:
        LookupError: Carrying the :class:`TraceFormatError` that names what is missing
            (``.args[0]``), so that the caller decides whether a missing field is an error.
    """
    try:
        return _select(trace, selector)
    except _Missing as missing:
        raise LookupError(missing.error) from None
