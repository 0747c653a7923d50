"""Served calls as OpenTelemetry spans (``marft serve --trace-otlp [URL] --trace-file PATH``).

Each call is one ``chat {agent}`` span with the GenAI attributes of
:func:`~marft_algos.runs.trace_attributes.chat_attributes` (docs/tracing.md, "Served calls"). A call joins
its caller's trace when the request carries a W3C ``traceparent`` header; otherwise the calls of
one session (the ``X-Session-Id`` header, or ``metadata.session_id`` / ``metadata.episode_id`` in
the body) share a trace, recorded with ``gen_ai.conversation.id``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from marft_algos.runs.tracing import EpisodeTracer, NoTracer
from marft_envs.wire.protocol import Reply

__all__ = ["SESSION_HEADER", "call_session", "trace_call"]

#: The request header naming a call's session (episode).
SESSION_HEADER = "x-session-id"

#: Body ``metadata`` keys naming a call's session, in the order they are looked for.
SESSION_KEYS = ("session_id", "episode_id")


def call_session(headers: Mapping[str, str], body: Mapping[str, Any]) -> str | None:
    """The session a call belongs to: its ``X-Session-Id`` header, else its body's
    ``metadata.session_id`` or ``metadata.episode_id``; None when it names none."""
    named = headers.get(SESSION_HEADER)
    if named:
        return named
    metadata = body.get("metadata")
    if isinstance(metadata, Mapping):
        for key in SESSION_KEYS:
            value = metadata.get(key)
            if isinstance(value, str | int) and not isinstance(value, bool) and str(value):
                return str(value)
    return None


def trace_call(
    tracer: EpisodeTracer | NoTracer,
    agent: str,
    messages: Any,
    headers: Mapping[str, str],
    body: Mapping[str, Any],
    outcome: Any,
    times: tuple[int, int],
) -> None:
    """Record one served call: its :class:`~marft_envs.wire.protocol.Reply`, or the error response
    that refused it (``error.type`` is its HTTP status)."""
    lowered = {k.lower(): v for k, v in headers.items()}
    plain = (
        [dict(m) for m in messages if isinstance(m, Mapping)] if isinstance(messages, list) else []
    )
    common: dict[str, Any] = {
        "times": times,
        "messages": plain,
        "session": call_session(lowered, body),
        "carrier": lowered if "traceparent" in lowered else None,
    }
    if isinstance(outcome, Reply):
        tracer.record_call(
            agent,
            input_tokens=outcome.prompt_tokens,
            output_tokens=outcome.completion_tokens,
            finished=outcome.finished,
            reply=outcome.text,
            **common,
        )
    else:
        status = str(getattr(outcome, "status_code", 500))
        tracer.record_call(
            agent, input_tokens=0, output_tokens=0, finished=False, error=status, **common
        )
