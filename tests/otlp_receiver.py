"""A local OTLP/HTTP trace receiver for the tests: what a collector or a trace viewer does on
``POST /v1/traces``, decoded with ``opentelemetry-proto`` (the ``otel`` extra). Binds 127.0.0.1 and
stops on every exit path (use it as a context manager). Importable from every test folder."""

from __future__ import annotations

import gzip
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


def attribute_value(value: Any) -> Any:
    """A decoded ``AnyValue`` as a Python value."""
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return tuple(attribute_value(v) for v in value.array_value.values)
    return getattr(value, kind) if kind is not None else None


class OTLPReceiver:
    """Collects every span sent to ``<url>/v1/traces`` as a dict: ``name``, ``trace_id``,
    ``span_id``, ``parent_span_id`` (hex; "" for a root), ``kind``, ``status_code``, ``start``,
    ``end``, ``attributes`` and the ``resource`` attributes."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.requests = 0
        self.paths: list[str] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                receiver.add(self.path, ExportTraceServiceRequest.FromString(body))
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                return None

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def add(self, path: str, request: ExportTraceServiceRequest) -> None:
        with self._lock:
            self.requests += 1
            self.paths.append(path)
            for resource_spans in request.resource_spans:
                resource = {
                    a.key: attribute_value(a.value) for a in resource_spans.resource.attributes
                }
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        self.spans.append(
                            {
                                "name": span.name,
                                "trace_id": span.trace_id.hex(),
                                "span_id": span.span_id.hex(),
                                "parent_span_id": span.parent_span_id.hex(),
                                "kind": span.kind,
                                "status_code": span.status.code,
                                "start": span.start_time_unix_nano,
                                "end": span.end_time_unix_nano,
                                "attributes": {
                                    a.key: attribute_value(a.value) for a in span.attributes
                                },
                                "resource": resource,
                                "scope": scope_spans.scope.name,
                            }
                        )

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)

    def __enter__(self) -> OTLPReceiver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
