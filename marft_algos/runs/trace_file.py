"""Spans to a JSON-lines file in the OTLP/JSON encoding (what ``marft ... --trace-file`` writes).

Each line is one ``ExportTraceServiceRequest`` in the OTLP/JSON encoding of the OpenTelemetry
protocol specification, the shape the OpenTelemetry Collector's file exporter writes:
``{"resourceSpans": [{"resource": ..., "scopeSpans": [{"scope": ..., "spans": [...]}]}]}``, with
lowerCamelCase keys, ``traceId`` / ``spanId`` / ``parentSpanId`` as lowercase hex, 64-bit integers
and nanosecond times as decimal strings, and enums (``kind``, ``status.code``) as integers. One line
holds one export batch, so the spans of one trace may be spread over several lines (group them by
``traceId``). docs/tracing.md describes the spans and their attributes.

Importing this module imports OpenTelemetry (the ``otel`` extra); :mod:`marft_algos.runs.tracing`
imports it only when tracing to a file is on.
"""

from __future__ import annotations

import base64
import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

__all__ = ["OTLPJsonLinesExporter", "otlp_json"]

#: Span fields holding ids, which protobuf's JSON mapping writes as base64 and OTLP/JSON as hex.
_ID_FIELDS = ("traceId", "spanId", "parentSpanId")


def _hex_ids(record: dict[str, Any]) -> None:
    for name in _ID_FIELDS:
        if name in record:
            record[name] = base64.b64decode(record[name]).hex()


def otlp_json(spans: Sequence[ReadableSpan]) -> dict[str, Any]:
    """The spans as one OTLP/JSON ``ExportTraceServiceRequest`` object: the OTLP exporters' own
    protobuf encoding, in protobuf's JSON mapping, with the ids turned to hex as OTLP/JSON
    requires."""
    request = json_format.MessageToDict(encode_spans(spans), use_integers_for_enums=True)
    for resource in request.get("resourceSpans", []):
        for scope in resource.get("scopeSpans", []):
            for span in scope.get("spans", []):
                _hex_ids(span)
                for link in span.get("links", []):
                    _hex_ids(link)
    return request


class OTLPJsonLinesExporter(SpanExporter):
    """Appends each export batch to ``path`` as one OTLP/JSON line (see the module notes).

    Args:
        path: The file; created with its folder if missing, appended to otherwise.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Each line is one write() to a file opened for appending, so the processes of a
        # distributed run may share the file without tearing each other's lines.
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        line = json.dumps(otlp_json(spans), ensure_ascii=False, separators=(",", ":")) + "\n"
        data = memoryview(line.encode("utf-8"))
        with self._lock:
            if self._fd is None:
                return SpanExportResult.FAILURE
            while data:
                data = data[os.write(self._fd, data) :]
        return SpanExportResult.SUCCESS

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True  # every export is flushed as it is written

    def shutdown(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
