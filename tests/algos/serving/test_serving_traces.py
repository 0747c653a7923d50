"""marft serve records every call as a GenAI span: joined to the caller's trace by a W3C
traceparent, grouped per session otherwise, refused calls with status ERROR, and message text
only when asked."""

from __future__ import annotations

import json

import httpx
import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otel extra: pip install 'marft[otel]'")

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from test_serving_app import _team

from marft_algos.runs.tracing import EpisodeTracer, TraceSettings
from marft_algos.serving import BackgroundServer

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"


def _serve_calls(settings, calls):
    memory = InMemorySpanExporter()
    tracer = EpisodeTracer(settings, exporters=[memory])
    try:
        with BackgroundServer(_team(), tracer=tracer) as server, httpx.Client() as client:
            for path, body, headers in calls:
                client.post(f"{server.url}/{path}", json=body, headers=headers, timeout=30)
    finally:
        tracer.close()
    return memory.get_finished_spans()


def _chat(model="planner", **extra):
    return {"model": model, "messages": [{"role": "user", "content": "add 2 and 3"}], **extra}


def test_served_calls_are_spans_grouped_by_trace_or_session(monkeypatch):
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    traceparent = {"traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"}
    spans = _serve_calls(
        TraceSettings(),
        [
            ("chat/completions", _chat(), traceparent),
            ("chat/completions", _chat("math"), {"X-Session-Id": "episode-7"}),
            ("chat/completions", _chat(metadata={"session_id": "episode-7"}), {}),
            ("responses", {"model": "planner", "input": "hello"}, {}),
            ("chat/completions", _chat("nobody"), {}),
        ],
    )
    assert [s.name for s in spans] == [
        "chat planner",
        "chat math",
        "chat planner",
        "chat planner",
        "chat nobody",
    ]
    joined, session_a, session_b, alone, refused = spans
    assert format(joined.context.trace_id, "032x") == CALLER_TRACE
    assert format(joined.parent.span_id, "016x") == CALLER_SPAN
    assert session_a.context.trace_id == session_b.context.trace_id
    assert session_a.attributes["gen_ai.conversation.id"] == "episode-7"
    assert session_b.attributes["gen_ai.conversation.id"] == "episode-7"
    assert alone.parent is None and "gen_ai.conversation.id" not in alone.attributes
    assert len({s.context.trace_id for s in (joined, session_a, alone, refused)}) == 4
    for span in (joined, session_a, session_b, alone):
        agent = span.name.split()[1]
        assert span.kind is SpanKind.CLIENT
        assert span.attributes["gen_ai.operation.name"] == "chat"
        assert span.attributes["gen_ai.request.model"] == agent
        assert span.attributes["gen_ai.agent.name"] == agent
        assert span.attributes["gen_ai.usage.input_tokens"] == 3  # the scripted generation's
        assert span.attributes["gen_ai.usage.output_tokens"] == 5
        assert span.attributes["gen_ai.response.finish_reasons"] == ("stop",)
        assert span.status.status_code is StatusCode.UNSET
        assert not any("messages" in k for k in span.attributes), "message text is opt-in"
        assert span.start_time <= span.end_time
    assert refused.status.status_code is StatusCode.ERROR
    assert refused.attributes["error.type"] == "404"
    assert "gen_ai.usage.output_tokens" not in refused.attributes


def test_served_call_text_when_asked():
    (span,) = _serve_calls(TraceSettings(capture_content=True), [("chat/completions", _chat(), {})])
    assert json.loads(span.attributes["gen_ai.input.messages"]) == [
        {"role": "user", "parts": [{"type": "text", "content": "add 2 and 3"}]}
    ]
    output = json.loads(span.attributes["gen_ai.output.messages"])
    assert output[0]["parts"] == [{"type": "text", "content": "planner answers"}]
