"""Small recorded-trace files written by the tests: OTLP/JSON spans built by hand, chat logs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parents[2] / "data" / "traces"

#: The real instrumentations' files (tests/data/traces/generate.py): four tickets, the last a
#: repeat of the first, each answered by ``router`` then ``solver``.
RECORDED = {
    "openai-v2 events": [
        DATA / "openai_v2_events.spans.jsonl",
        DATA / "openai_v2_events.logs.jsonl",
    ],
    "openai-v2 latest": [DATA / "openai_v2_latest.jsonl"],
    "openinference": [DATA / "openinference.jsonl"],
}
TICKETS = [
    "My invoice #1042 was charged twice.",
    "How do I reset my password?",
    "The app crashes when I upload a photo.",
]


def value(v: Any) -> dict[str, Any]:
    """A Python value as an OTLP/JSON AnyValue."""
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, float):
        return {"doubleValue": v}
    if isinstance(v, list):
        return {"arrayValue": {"values": [value(x) for x in v]}}
    if isinstance(v, dict):
        return {"kvlistValue": {"values": kvs(v)}}
    return {"stringValue": str(v)}


def kvs(attributes: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"key": k, "value": value(v)} for k, v in attributes.items()]


def span(
    trace: str,
    span_id: str,
    name: str,
    attributes: dict[str, Any],
    *,
    parent: str = "",
    start: int = 0,
    events: list[tuple[str, dict[str, Any]]] = (),  # type: ignore[assignment]
) -> dict[str, Any]:
    out = {
        "traceId": trace.ljust(32, "0"),
        "spanId": span_id.ljust(16, "0"),
        "parentSpanId": parent.ljust(16, "0") if parent else "",
        "name": name,
        "kind": 1,
        "startTimeUnixNano": str(1_700_000_000_000_000_000 + start),
        "endTimeUnixNano": str(1_700_000_000_000_000_000 + start + 5),
        "attributes": kvs(attributes),
        "status": {},
    }
    if events:
        out["events"] = [{"name": n, "attributes": kvs(a)} for n, a in events]
    return out


def request(spans: list[dict[str, Any]]) -> dict[str, Any]:
    """One ExportTraceServiceRequest holding ``spans``."""
    resource = {"attributes": kvs({"service.name": "helpdesk"})}
    return {
        "resourceSpans": [
            {"resource": resource, "scopeSpans": [{"scope": {"name": "t"}, "spans": spans}]}
        ]
    }


def write_lines(path: Path, records: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def genai_call(
    trace: str, span_id: str, parent: str, agent: str, prompt: str, reply: str, start: int
) -> dict[str, Any]:
    """A model call in the newer GenAI conventions (``gen_ai.input.messages`` attributes)."""
    return span(
        trace,
        span_id,
        f"chat {agent}",
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": agent,
            "gen_ai.input.messages": json.dumps(
                [{"role": "user", "parts": [{"type": "text", "content": prompt}]}]
            ),
            "gen_ai.output.messages": json.dumps(
                [
                    {
                        "role": "assistant",
                        "parts": [{"type": "text", "content": reply}],
                        "finish_reason": "stop",
                    }
                ]
            ),
        },
        parent=parent,
        start=start,
    )


def ticket_trace(trace: str, ticket: str) -> list[dict[str, Any]]:
    """A root span holding ``app.ticket`` and one ``solo`` call answering it."""
    root = span(trace, "01", "handle_ticket", {"app.ticket": ticket})
    return [root, genai_call(trace, "02", "01", "solo", ticket, "done", 1)]
