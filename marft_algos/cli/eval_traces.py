"""``marft eval --trace-otlp [URL] --trace-file PATH --trace-content``: the held-out episodes as
OpenTelemetry traces (docs/tracing.md).

The checkpoint's episodes are traced with ``marft.split`` ``eval`` and ``marft.policy_version`` the
checkpoint's iteration; with ``--before``, the untuned team's with ``marft.split`` ``before`` and
policy version 0 (no update applied). ``marft.iteration`` is the checkpoint's iteration.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from marft_algos.cli.parsing import UsageError

__all__ = ["TraceArguments", "traced_reports"]


@dataclass
class TraceArguments:
    """Where a command's episodes go as OpenTelemetry traces (all off by default)."""

    trace_otlp: str | None = field(default=None, metadata={"nargs": "?", "const": ""})
    """Send every episode as an OpenTelemetry trace over OTLP/HTTP to this collector's URL (the flag without a URL: the endpoint of the standard OTEL_EXPORTER_OTLP_* variables); needs the otel extra (docs/tracing.md)."""
    trace_file: str | None = None
    """Append every episode's spans to this file, one OTLP/JSON request per line (docs/tracing.md)."""
    trace_content: bool = False
    """Record message text in the spans; also on with OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true."""

    def tracer(self) -> Any:
        """The tracer these flags ask for (one that does nothing when they are off)."""
        from marft_algos.runs.tracing import TraceSettings, episode_tracer

        try:
            settings = TraceSettings(self.trace_otlp, self.trace_file, self.trace_content)
        except ValueError as err:
            raise UsageError(str(err)) from None
        return episode_tracer(settings)


def traced_reports(
    report: Callable[[Sequence[Any], str], None], tracer: Any, iteration: int, env: Any
) -> Callable[[Sequence[Any], str], None]:
    """``report`` (called with each split's episodes) that first sends the episodes' traces."""

    def traced(episodes: Sequence[Any], split: str) -> None:
        version = 0 if split == "before" else iteration
        tracer.record(episodes, iteration, split, policy_version=version, env=env)
        report(episodes, split)

    return traced
