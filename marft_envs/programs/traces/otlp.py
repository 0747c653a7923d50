"""OTLP JSON files, as the OpenTelemetry Collector's file exporter writes them.

Each line is one ``ExportTraceServiceRequest`` (``resourceSpans`` → ``scopeSpans`` → ``spans``) or
``ExportLogsServiceRequest`` (``resourceLogs`` → ``scopeLogs`` → ``logRecords``) in the OTLP/JSON
encoding: hex ``traceId``/``spanId``, attribute values as ``{"stringValue": ...}``,
``{"intValue": "3"}``, ``{"arrayValue": {"values": [...]}}``, ``{"kvlistValue": ...}``. A file may
also hold one whole (pretty-printed) request, or a JSON list of them. The pre-1.0
``instrumentationLibrarySpans``/``instrumentationLibraryLogs`` names are read too.

Log records matter because ``opentelemetry-instrumentation-openai-v2`` emits the messages of its
older conventions as events (``gen_ai.user.message``, ``gen_ai.choice``) through the logs
signal, tied to their span by ``traceId``/``spanId``; the collector writes them to a logs file.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from marft_envs.programs.traces.records import TraceFormatError

__all__ = ["LogEvent", "Span", "SpanEvent", "is_otlp", "read_otlp"]

_SPANS = (
    ("resourceSpans", "scopeSpans", "spans"),
    ("resourceSpans", "instrumentationLibrarySpans", "spans"),
)
_LOGS = (
    ("resourceLogs", "scopeLogs", "logRecords"),
    ("resourceLogs", "instrumentationLibraryLogs", "logRecords"),
)


@dataclass
class SpanEvent:
    """An event on a span (``span.add_event``): its name and attributes."""

    name: str
    attributes: dict[str, Any]


@dataclass
class Span:
    """One span, its attributes decoded to Python values.

    ``trace_id``, ``span_id``, ``parent_id`` and ``start`` (``startTimeUnixNano``) group and order
    spans; they are never copied into calls or tasks.
    """

    trace_id: str
    span_id: str
    parent_id: str
    name: str
    attributes: dict[str, Any]
    events: list[SpanEvent]
    start: int
    where: str
    """``file:line`` and the span's path in the request, for messages."""
    logs: list[LogEvent] = field(default_factory=list)
    """The log records (event-API events) that name this span."""


@dataclass
class LogEvent:
    """A log record that is an event (``eventName`` or the ``event.name`` attribute)."""

    trace_id: str
    span_id: str
    name: str
    body: Any
    attributes: dict[str, Any]
    time: int
    where: str


def any_value(value: Any, where: str, name: str) -> Any:
    """An OTLP/JSON ``AnyValue`` as a Python value (``kvlistValue`` a dict, ``arrayValue`` a list,
    ``intValue`` an int, ``bytesValue`` bytes)."""
    if not isinstance(value, Mapping):
        raise TraceFormatError(
            where,
            name,
            f"an attribute value must be an object such as "
            f'{{"stringValue": "..."}}, got {value!r:.60}.',
        )
    if not value:
        return None
    if "stringValue" in value:
        return str(value["stringValue"])
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "intValue" in value:
        try:
            return int(value["intValue"])
        except (TypeError, ValueError):
            raise TraceFormatError(
                where, name, f"intValue {value['intValue']!r:.40} is not an integer."
            ) from None
    if "doubleValue" in value:
        return float(value["doubleValue"])
    if "arrayValue" in value:
        items = (value["arrayValue"] or {}).get("values", [])
        return [any_value(v, where, f"{name}[{i}]") for i, v in enumerate(items)]
    if "kvlistValue" in value:
        return attributes((value["kvlistValue"] or {}).get("values", []), where, name)
    if "bytesValue" in value:
        return base64.b64decode(value["bytesValue"])
    raise TraceFormatError(
        where,
        name,
        f"unknown attribute value kind {sorted(value)}; OTLP/JSON "
        f"uses stringValue, boolValue, intValue, doubleValue, arrayValue, "
        f"kvlistValue or bytesValue.",
    )


def attributes(items: Any, where: str, name: str = "attributes") -> dict[str, Any]:
    """A list of OTLP/JSON ``KeyValue`` as a dict."""
    if not isinstance(items, list):
        raise TraceFormatError(
            where, name, f'must be a list of {{"key", "value"}}, got {type(items).__name__}.'
        )
    out: dict[str, Any] = {}
    for i, item in enumerate(items):
        if not isinstance(item, Mapping) or not isinstance(item.get("key"), str):
            raise TraceFormatError(
                where, f"{name}[{i}]", f'must be {{"key": ..., "value": ...}}, got {item!r:.60}.'
            )
        out[item["key"]] = any_value(item.get("value", {}), where, f"{name}[{i}] ({item['key']})")
    return out


def is_otlp(record: Any) -> bool:
    """Whether a decoded JSON value is an OTLP export request (or a list of them)."""
    if isinstance(record, list):
        return bool(record) and all(is_otlp(r) for r in record)
    return isinstance(record, Mapping) and ("resourceSpans" in record or "resourceLogs" in record)


def _hex_id(value: Any, where: str, name: str, required: bool) -> str:
    if value in (None, "") and not required:
        return ""
    if (
        not isinstance(value, str)
        or not value
        or any(c not in "0123456789abcdefABCDEF" for c in value)
    ):
        raise TraceFormatError(
            where,
            name,
            f"must be a hex id as OTLP/JSON writes it, got "
            f"{value!r:.40} (a file written by the collector's file exporter "
            f"has them; base64 ids come from the protobuf JSON mapping, which "
            f"OTLP/JSON does not use).",
        )
    return value.lower()


def _nanos(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _groups(
    request: Mapping[str, Any], paths: tuple[tuple[str, str, str], ...], where: str
) -> Iterator[tuple[str, Mapping[str, Any]]]:
    for top, scope_key, item_key in paths:
        resources = request.get(top)
        if resources is None:
            continue
        if not isinstance(resources, list):
            raise TraceFormatError(where, top, "must be a list.")
        for r, resource in enumerate(resources):
            scopes = resource.get(scope_key) if isinstance(resource, Mapping) else None
            if scopes is None:
                continue
            if not isinstance(scopes, list):
                raise TraceFormatError(where, f"{top}[{r}].{scope_key}", "must be a list.")
            for s, scope in enumerate(scopes):
                items = scope.get(item_key, []) if isinstance(scope, Mapping) else None
                if not isinstance(items, list):
                    raise TraceFormatError(
                        where, f"{top}[{r}].{scope_key}[{s}].{item_key}", "must be a list."
                    )
                for i, item in enumerate(items):
                    path = f"{top}[{r}].{scope_key}[{s}].{item_key}[{i}]"
                    if not isinstance(item, Mapping):
                        raise TraceFormatError(where, path, f"must be an object, got {item!r:.40}.")
                    yield path, item


def _span(item: Mapping[str, Any], where: str, path: str) -> Span:
    here = f"{where} {path}"
    for key in ("traceId", "spanId", "name"):
        if key not in item:
            raise TraceFormatError(
                here, key, "missing: a malformed span (OTLP spans carry traceId, spanId and name)."
            )
    events = []
    for e, event in enumerate(item.get("events") or []):
        if not isinstance(event, Mapping) or not isinstance(event.get("name"), str):
            raise TraceFormatError(here, f"events[{e}]", "must be an object with a name.")
        events.append(
            SpanEvent(
                event["name"],
                attributes(event.get("attributes") or [], here, f"events[{e}].attributes"),
            )
        )
    return Span(
        trace_id=_hex_id(item["traceId"], here, "traceId", True),
        span_id=_hex_id(item["spanId"], here, "spanId", True),
        parent_id=_hex_id(item.get("parentSpanId"), here, "parentSpanId", False),
        name=str(item["name"]),
        attributes=attributes(item.get("attributes") or [], here),
        events=events,
        start=_nanos(item.get("startTimeUnixNano")),
        where=here,
    )


def _log(item: Mapping[str, Any], where: str, path: str) -> LogEvent | None:
    here = f"{where} {path}"
    attrs = attributes(item.get("attributes") or [], here)
    name = item.get("eventName") or attrs.get("event.name")
    if not name or not item.get("traceId") or not item.get("spanId"):
        return None  # a plain log line, or an event tied to no span: not a model call's message
    body = any_value(item["body"], here, "body") if item.get("body") is not None else None
    return LogEvent(
        trace_id=_hex_id(item["traceId"], here, "traceId", True),
        span_id=_hex_id(item["spanId"], here, "spanId", True),
        name=str(name),
        body=body,
        attributes=attrs,
        time=_nanos(item.get("timeUnixNano") or item.get("observedTimeUnixNano")),
        where=here,
    )


def _requests(path: Path) -> Iterator[tuple[int, Any]]:
    """``(line, request)`` for each request in the file: one a line, or one whole document."""
    text = path.read_text(encoding="utf-8")
    try:
        whole = json.loads(text)
    except json.JSONDecodeError:
        whole = None
    if whole is not None:
        for request in whole if isinstance(whole, list) else [whole]:
            yield 1, request
        return
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except json.JSONDecodeError as err:
            raise TraceFormatError(
                f"{path}:{number}",
                "",
                f"not JSON ({err.msg} at column "
                f"{err.colno}); an OTLP file holds one export request a "
                f"line.",
            ) from None


def read_otlp(path: Path) -> tuple[list[Span], list[LogEvent]]:
    """The spans and the span-bound log events of one OTLP JSON file, in file order."""
    spans: list[Span] = []
    logs: list[LogEvent] = []
    for number, request in _requests(path):
        where = f"{path}:{number}"
        if not is_otlp(request):
            keys = sorted(request)[:6] if isinstance(request, Mapping) else type(request).__name__
            raise TraceFormatError(
                where,
                "resourceSpans",
                f"missing: not an OTLP export request "
                f"(found {keys}); mixed files are not read, give OTLP and chat "
                f"logs as separate files.",
            )
        for span_path, item in _groups(request, _SPANS, where):
            spans.append(_span(item, where, span_path))
        for log_path, item in _groups(request, _LOGS, where):
            event = _log(item, where, log_path)
            if event is not None:
                logs.append(event)
    return spans, logs
