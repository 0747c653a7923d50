"""Every episode as an OpenTelemetry trace: one root span per episode, one span per agent decision.

Off by default, and free when off: nothing of OpenTelemetry is imported until a tracer is built
(:func:`episode_tracer` returns None for settings that trace nowhere). On with
:class:`TraceSettings` (``marft train/eval/serve --trace-otlp [URL] --trace-file PATH``; the
trainer's ``trace_otlp`` / ``trace_file`` / ``trace_content``), spans go through the OpenTelemetry
SDK: a ``TracerProvider`` with a batch processor per destination, the SDK's OTLP/HTTP exporter
(which honours the standard ``OTEL_EXPORTER_OTLP_*`` variables) and
:class:`~marft_algos.runs.trace_file.OTLPJsonLinesExporter` for a file.

A decision's span follows the OpenTelemetry GenAI semantic conventions for a model call: name
``chat {agent}``, kind CLIENT, ``gen_ai.operation.name="chat"``, the agent's name as
``gen_ai.request.model`` and ``gen_ai.agent.name``, the prompt and reply token counts and the
finish reason. Message text is recorded only when asked (``capture_content``, or
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``), as ``gen_ai.input.messages`` and
``gen_ai.output.messages`` (JSON strings), as the conventions require. The ``marft.*``
attributes (iteration, episode, policy version, rewards, failures, branch) are listed with the
others in docs/tracing.md. Spans are made after the episode, with the times the collector
recorded (:class:`~marft_algos.rollout.episodes.Decision` ``started_ns`` / ``ended_ns``).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from marft_algos.rollout.episodes import Decision, Episode
from marft_algos.rollout.failures import failure_kind
from marft_algos.runs.trace_attributes import (
    branch_id,
    chat_attributes,
    env_id_of,
    episode_attributes,
    genai_messages,
    output_message,
)
from marft_algos.runs.trace_settings import (
    CAPTURE_CONTENT_VARIABLE,
    TRACE_FIELDS,
    TraceSettings,
    otlp_endpoint,
)

__all__ = [
    "CAPTURE_CONTENT_VARIABLE",
    "TRACE_FIELDS",
    "EpisodeTracer",
    "NoTracer",
    "TraceSettings",
    "episode_tracer",
    "genai_messages",
]

#: Spans recorded between two waits for the exporters: half the SDK's default queue of a batch
#: processor (2048), which drops spans that arrive while it is full (a large evaluation would).
FLUSH_EVERY = 1024


class NoTracer:
    """What :func:`episode_tracer` gives for settings that trace nowhere: every call does nothing
    (and nothing of OpenTelemetry is imported)."""

    enabled = False

    def record(
        self, episodes: Iterable[Episode], iteration: int, split: str, **kwargs: Any
    ) -> None:
        return None

    def record_call(self, agent: str, **kwargs: Any) -> None:
        return None

    def flush(self) -> None:
        return None

    def close(self) -> None:
        return None


def episode_tracer(settings: TraceSettings | None, **kwargs: Any) -> EpisodeTracer | NoTracer:
    """A tracer for ``settings``, or a :class:`NoTracer` when they trace nowhere (nothing of
    OpenTelemetry is imported then); ``kwargs`` go to :class:`EpisodeTracer`."""
    if settings is None or not settings.enabled:
        return NoTracer()
    return EpisodeTracer(settings, **kwargs)


def _sdk() -> Any:
    """The OpenTelemetry SDK's trace module, or an error naming the extra to install."""
    try:
        from opentelemetry.sdk import trace
    except ImportError as err:
        raise ImportError(
            f"Tracing needs the OpenTelemetry packages ({err.name} is missing): "
            f"pip install 'marft[otel]'."
        ) from None
    return trace


def _exporters(settings: TraceSettings) -> list[Any]:
    exporters: list[Any] = []
    if settings.otlp is not None:
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError as err:
            raise ImportError(
                f"--trace-otlp needs the OTLP exporter ({err.name} is missing): "
                f"pip install 'marft[otel]'."
            ) from None
        exporters.append(OTLPSpanExporter(endpoint=otlp_endpoint(settings.otlp)))
    if settings.file is not None:
        try:
            from marft_algos.runs.trace_file import OTLPJsonLinesExporter
        except ImportError as err:
            raise ImportError(
                f"--trace-file needs the OpenTelemetry packages ({err.name} is missing): "
                f"pip install 'marft[otel]'."
            ) from None
        exporters.append(OTLPJsonLinesExporter(settings.file))
    return exporters


class EpisodeTracer:
    """Turns finished episodes (and served calls) into spans, exported where the settings say.

    Args:
        settings: Destinations and content capture.
        exporters: Further span exporters, each behind a simple (synchronous) processor (tests
            pass the SDK's ``InMemorySpanExporter``).
        resource: Further resource attributes (e.g. ``{"marft.run": "runs/x"}``).

    Raises:
        ImportError: The ``otel`` extra is not installed (the message says how to install it).
    """

    enabled = True

    def __init__(
        self,
        settings: TraceSettings,
        *,
        exporters: Sequence[Any] = (),
        resource: Mapping[str, Any] | None = None,
    ) -> None:
        trace = _sdk()
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

        self.settings = settings
        attributes = {"service.name": settings.service_name, **(resource or {})}
        self.provider = trace.TracerProvider(resource=Resource.create(attributes))
        for exporter in _exporters(settings):
            self.provider.add_span_processor(BatchSpanProcessor(exporter))
        for exporter in exporters:
            self.provider.add_span_processor(SimpleSpanProcessor(exporter))
        self.tracer = self.provider.get_tracer("marft")
        self._unflushed = 0  # spans recorded since the exporters last caught up

    def record(
        self,
        episodes: Iterable[Episode],
        iteration: int,
        split: str,
        *,
        policy_version: int | None = None,
        first_index: int = 0,
        env: Any = None,
    ) -> None:
        """One trace per episode.

        Args:
            episodes: Finished episodes (failed ones included: their root span has status ERROR).
            iteration: The training iteration they belong to (``marft.iteration``).
            split: ``"train"``, ``"eval"`` or ``"eval_sampled"`` (``marft.split``).
            policy_version: Updates applied to the adapters that sampled them, where a decision
                records none (default ``iteration``).
            first_index: ``marft.episode`` of the first episode (the others count up).
            env: The env they ran in, or its id: its registered id is ``marft.env.id`` and in
                the root span's name.
        """
        version = iteration if policy_version is None else policy_version
        env_id = env if isinstance(env, str) or env is None else env_id_of(env)
        for offset, episode in enumerate(episodes):
            common = {
                "marft.iteration": iteration,
                "marft.episode": first_index + offset,
                "marft.split": split,
            }
            self._episode(episode, common, version, env_id)
            self._unflushed += 1 + len(episode.decisions)
            if self._unflushed >= FLUSH_EVERY:
                self.flush()

    def _episode(
        self, episode: Episode, common: dict[str, Any], version: int, env_id: str | None
    ) -> None:
        from opentelemetry import context, trace
        from opentelemetry.trace import SpanKind, Status, StatusCode

        now = time.time_ns()
        starts = [d.started_ns for d in episode.decisions if d.started_ns is not None]
        ends = [d.ended_ns for d in episode.decisions if d.ended_ns is not None]
        start = episode.started_ns or min(starts, default=now)
        end = max([episode.ended_ns or 0, *ends]) or now
        root = self.tracer.start_span(
            "episode" if env_id is None else f"episode {env_id}",
            context=context.Context(),  # a new trace, whatever span is current
            attributes={**common, **episode_attributes(episode, version, env_id)},
            start_time=min(start, end),
        )
        kind = failure_kind(episode)
        if kind is not None:
            error = episode.info.get("program_error")
            message = error.get("message") if isinstance(error, Mapping) else None
            root.set_status(Status(StatusCode.ERROR, f"{kind}: {message}" if message else kind))
        parent = trace.set_span_in_context(root)
        for decision in episode.decisions:
            span = self.tracer.start_span(
                f"chat {decision.agent}",
                context=parent,
                kind=SpanKind.CLIENT,
                attributes={**common, **self._decision_attributes(decision, version)},
                start_time=decision.started_ns or start,
            )
            span.end(end_time=decision.ended_ns or decision.started_ns or start)
        root.end(end_time=end)

    def _decision_attributes(self, d: Decision, version: int) -> dict[str, Any]:
        attributes = chat_attributes(
            d.agent, len(d.prompt_ids), len(d.action_ids), bool(d.finished)
        )
        attributes.update(
            {
                "marft.policy_version": d.policy_version
                if d.policy_version is not None
                else version,
                "marft.timestep": d.timestep,
                "marft.turn": d.turn,
                "marft.reward": float(d.reward),
            }
        )
        if d.branch is not None:
            attributes["marft.branch.id"] = branch_id(d.branch)
            attributes["marft.branch.copy"] = d.branch_copy
        if self.settings.content:
            attributes["gen_ai.input.messages"] = json.dumps(
                genai_messages(d.messages), ensure_ascii=False
            )
            attributes["gen_ai.output.messages"] = json.dumps(
                [output_message(d.text, bool(d.finished))], ensure_ascii=False
            )
            if d.tools:
                attributes["gen_ai.tool.definitions"] = json.dumps(d.tools, ensure_ascii=False)
        return attributes

    def record_call(
        self,
        agent: str,
        *,
        input_tokens: int,
        output_tokens: int,
        finished: bool,
        times: tuple[int, int],
        messages: Sequence[Mapping[str, Any]] = (),
        reply: str = "",
        session: str | None = None,
        carrier: Mapping[str, str] | None = None,
        error: str | None = None,
    ) -> None:
        """One served call as a span (``marft serve``).

        It joins the caller's trace when ``carrier`` (the request's headers) holds a W3C
        ``traceparent``; otherwise the calls of one ``session`` share a trace whose id is derived
        from it, and a call without either is a trace of its own. ``session`` is recorded as
        ``gen_ai.conversation.id``.
        """
        from opentelemetry import context
        from opentelemetry.propagate import extract
        from opentelemetry.trace import SpanKind, Status, StatusCode

        parent = extract(carrier) if carrier is not None else context.Context()
        if _no_span(parent) and session:
            parent = _session_context(session)
        attributes = chat_attributes(agent, input_tokens, output_tokens, finished)
        if error is not None:  # refused or failed: nothing was generated
            for name in ("gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens"):
                attributes.pop(name)
            attributes.pop("gen_ai.response.finish_reasons")
            attributes["error.type"] = error
        if session:
            attributes["gen_ai.conversation.id"] = session
        if self.settings.content:
            attributes["gen_ai.input.messages"] = json.dumps(
                genai_messages(messages), ensure_ascii=False
            )
            if error is None:
                attributes["gen_ai.output.messages"] = json.dumps(
                    [output_message(reply, finished)], ensure_ascii=False
                )
        span = self.tracer.start_span(
            f"chat {agent}",
            context=parent,
            kind=SpanKind.CLIENT,
            attributes=attributes,
            start_time=times[0],
        )
        if error is not None:
            span.set_status(Status(StatusCode.ERROR, error))
        span.end(end_time=times[1])

    def flush(self) -> None:
        """Export every span recorded so far (waits for the exporters)."""
        self._unflushed = 0
        self.provider.force_flush()

    def close(self) -> None:
        """Export what is left and shut the exporters down (idempotent)."""
        self.provider.shutdown()


def _no_span(ctx: Any) -> bool:
    from opentelemetry import trace

    return not trace.get_current_span(ctx).get_span_context().is_valid


def _session_context(session: str) -> Any:
    """A context whose (never emitted) parent span makes every call of ``session`` one trace:
    trace and parent ids are derived from the session id."""
    from opentelemetry import trace

    digest = hashlib.sha256(session.encode("utf-8")).digest()
    parent = trace.SpanContext(
        trace_id=int.from_bytes(digest[:16], "big") or 1,
        span_id=int.from_bytes(digest[16:24], "big") or 1,
        is_remote=True,
        trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),
    )
    return trace.set_span_in_context(trace.NonRecordingSpan(parent))
