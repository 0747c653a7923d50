"""Where episode spans go (:class:`TraceSettings`: an OTLP/HTTP endpoint, a JSON-lines file) and
whether they hold message text; imports nothing of OpenTelemetry (:mod:`marft_algos.runs.tracing`)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["CAPTURE_CONTENT_VARIABLE", "TRACE_FIELDS", "TraceSettings", "otlp_endpoint"]

#: The standard switch for message text in GenAI spans (``true`` turns it on).
CAPTURE_CONTENT_VARIABLE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"

#: The trainer's config fields that say where spans go (not what the run computes: a resumed run
#: may change them).
TRACE_FIELDS = frozenset({"trace_otlp", "trace_file", "trace_content"})


@dataclass(frozen=True)
class TraceSettings:
    """Where episode spans go, and whether they hold message text.

    Attributes:
        otlp: Send spans over OTLP/HTTP: a collector's base URL (``/v1/traces`` is appended
            unless the URL already ends with it), or ``""`` for the endpoint the standard
            variables name (``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, else
            ``OTEL_EXPORTER_OTLP_ENDPOINT``, else ``http://localhost:4318``); None: not sent.
        file: Append spans to this JSON-lines file in the OTLP/JSON encoding; None: no file.
        capture_content: Record message text (``gen_ai.input.messages`` /
            ``gen_ai.output.messages``); also on when ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``
            is ``true``.
        service_name: The resource's ``service.name`` (``OTEL_SERVICE_NAME`` overrides it, as the
            SDK reads it).
    """

    otlp: str | None = None
    file: str | None = None
    capture_content: bool = False
    service_name: str = "marft"

    def __post_init__(self) -> None:
        if self.otlp and not self.otlp.startswith(("http://", "https://")):
            raise ValueError(
                f"The OTLP endpoint must be an http:// or https:// URL (OTLP/HTTP), got "
                f"{self.otlp!r}; pass e.g. --trace-otlp http://127.0.0.1:4318, or no URL to use "
                f"the OTEL_EXPORTER_OTLP_ENDPOINT variable."
            )
        if self.file is not None and (not self.file or Path(self.file).is_dir()):
            raise ValueError(
                f"The trace file must be a file path, got {self.file!r}; pass e.g. "
                f"--trace-file runs/traces.jsonl."
            )

    @property
    def enabled(self) -> bool:
        """Whether spans go anywhere."""
        return self.otlp is not None or self.file is not None

    @property
    def content(self) -> bool:
        """Whether message text is recorded (the setting or the standard variable)."""
        flag = os.environ.get(CAPTURE_CONTENT_VARIABLE, "").strip().lower()
        return self.capture_content or flag == "true"

    @classmethod
    def of_config(cls, config: Any) -> TraceSettings:
        """The settings of a trainer config (its ``trace_otlp``, ``trace_file``, ``trace_content``)."""
        return cls(
            otlp=getattr(config, "trace_otlp", None),
            file=getattr(config, "trace_file", None),
            capture_content=bool(getattr(config, "trace_content", False)),
        )


def otlp_endpoint(url: str) -> str | None:
    """The traces URL of a collector's base URL (None for ``""``: the SDK reads the variables)."""
    if not url:
        return None
    url = url.rstrip("/")
    return url if url.endswith("/v1/traces") else url + "/v1/traces"
