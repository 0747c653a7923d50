"""Write the recorded-trace fixtures of this folder with the real instrumentations.

A two-agent team (``router`` then ``solver``, called as ``model=AGENT``) answers four tickets
(the last repeats the first) through the ``openai`` client, its HTTP answered in process; the
spans and log events are encoded by the SDK's OTLP encoder and written as OTLP/JSON (hex ids),
one export request a line, as the Collector's file exporter writes them:

- ``openai_v2_events.spans.jsonl`` + ``openai_v2_events.logs.jsonl``:
  ``opentelemetry-instrumentation-openai-v2==2.1b0`` (the last release of the older event
  conventions; it needs ``opentelemetry-sdk==1.30.0``) with content capture on: the messages
  are ``gen_ai.*.message``/``gen_ai.choice`` log events;
- ``openai_v2_latest.jsonl``: ``opentelemetry-instrumentation-openai-v2==2.4b0`` (with
  ``opentelemetry-util-genai==1.1b0``) and ``OTEL_SEMCONV_STABILITY_OPT_IN=
  gen_ai_latest_experimental`` and ``SPAN_ONLY``: ``gen_ai.input.messages`` attributes;
- ``openinference.jsonl``: ``openinference-instrumentation-openai``.

Not part of the test suite (it needs those packages, which marft does not depend on). Run::

    pip install opentelemetry-sdk opentelemetry-instrumentation-openai-v2 \
        openinference-instrumentation-openai
    python tests/data/traces/generate.py
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
TICKETS = [
    "My invoice #1042 was charged twice.",
    "How do I reset my password?",
    "The app crashes when I upload a photo.",
    "My invoice #1042 was charged twice.",
]
#: What it needs beyond marft (see the module notes for the versions of each file).
PACKAGES = (
    "opentelemetry-sdk",
    "opentelemetry-instrumentation-openai-v2",
    "openinference-instrumentation-openai",
)
MODES = {
    "openai_v2_events": {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"},
    "openai_v2_latest": {
        "OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental",
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "SPAN_ONLY",
    },
    "openinference": {},
}


def _hex_ids(value):  # type: ignore[no-untyped-def]
    """The protobuf JSON mapping writes ids in base64; OTLP/JSON writes them in hex."""
    if isinstance(value, dict):
        return {
            k: base64.b64decode(v).hex()
            if k in ("traceId", "spanId", "parentSpanId")
            else _hex_ids(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_hex_ids(v) for v in value]
    return value


def run(mode: str) -> None:
    try:
        import opentelemetry.sdk  # noqa: F401
    except ImportError:
        sys.exit(f"generate.py needs: pip install {' '.join(PACKAGES)}")
    import httpx
    import openai
    from google.protobuf.json_format import MessageToDict
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import InMemoryLogExporter, SimpleLogRecordProcessor
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    resource = Resource.create({"service.name": "helpdesk"})
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    logs = InMemoryLogExporter()
    logger_provider = LoggerProvider(resource=resource)
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(logs))
    if mode == "openinference":
        from openinference.instrumentation.openai import OpenAIInstrumentor as Instrumentor
    else:
        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor as Instrumentor
    providers = {"tracer_provider": tracer_provider, "logger_provider": logger_provider}
    try:  # the event conventions (openai-v2 <= 2.1b0) log through the events API
        from opentelemetry.sdk._events import EventLoggerProvider

        providers["event_logger_provider"] = EventLoggerProvider(logger_provider)
    except ImportError:
        pass
    Instrumentor().instrument(**providers)

    def answer(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        last = body["messages"][-1]["content"]
        text = "billing" if "invoice" in last else f"Reply to: {last[:40]}"
        return httpx.Response(
            200,
            json={
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "created": 1,
                "model": body["model"],
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "message": {"role": "assistant", "content": text},
                    }
                ],
                "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15},
            },
        )

    client = openai.OpenAI(
        api_key="x",
        base_url="http://127.0.0.1:9/v1",
        http_client=httpx.Client(transport=httpx.MockTransport(answer)),
    )
    tracer = trace.get_tracer("helpdesk", tracer_provider=tracer_provider)
    span_lines, log_lines = [], []
    for ticket in TICKETS:
        with tracer.start_as_current_span("handle_ticket") as root:
            root.set_attribute("app.ticket", ticket)
            route = (
                client.chat.completions.create(
                    model="router",
                    messages=[
                        {"role": "system", "content": "Route the ticket: billing or tech."},
                        {"role": "user", "content": ticket},
                    ],
                )
                .choices[0]
                .message.content
            )
            client.chat.completions.create(
                model="solver",
                messages=[
                    {"role": "system", "content": f"You are the {route} desk."},
                    {"role": "user", "content": ticket},
                ],
            )
        span_lines.append(
            MessageToDict(encode_spans(spans.get_finished_spans()), use_integers_for_enums=True)
        )
        spans.clear()
        if logs.get_finished_logs():
            log_lines.append(
                MessageToDict(encode_logs(logs.get_finished_logs()), use_integers_for_enums=True)
            )
            logs.clear()
    if log_lines:
        (HERE / f"{mode}.spans.jsonl").write_text(
            "".join(json.dumps(_hex_ids(r)) + "\n" for r in span_lines)
        )
        (HERE / f"{mode}.logs.jsonl").write_text(
            "".join(json.dumps(_hex_ids(r)) + "\n" for r in log_lines)
        )
    else:
        (HERE / f"{mode}.jsonl").write_text(
            "".join(json.dumps(_hex_ids(r)) + "\n" for r in span_lines)
        )


if __name__ == "__main__":
    if len(sys.argv) > 1:
        run(sys.argv[1])
    else:
        for name, env in MODES.items():  # one process each: an instrumentor patches for good
            subprocess.run([sys.executable, __file__, name], env={**os.environ, **env}, check=True)
