"""Recorded traces as tasks and transcripts: what a team did in production, read back.

Two entry points::

    load_trace_tasks(paths, *, task="first_user_message", format="auto", missing="error",
                     agents=None, fields=None) -> TraceTasks          # a list, plus .summary
    read_trace_calls(paths, *, format="auto", agents=None, fields=None) -> list[RecordedTrace]

``load_trace_tasks`` gives one task per recorded episode for ``register_program(tasks=...)``
(:func:`split_trace_tasks` holds out a share for ``test_tasks``). ``read_trace_calls`` gives each
episode's model calls in order, for a supervised warm start: ``trace.calls`` is a list of
:class:`RecordedCall` with ``agent`` (str), ``messages`` (the input, OpenAI chat messages),
``output`` (the assistant message; ``.reply`` its text), ``model``, ``finish_reason`` and
``where`` (``file:line``).

The files, one format each (``format="auto"`` tells them apart by the first record):

- OTLP JSON as the OpenTelemetry Collector's file exporter writes it (:mod:`.otlp`), its
  model-call spans in the GenAI conventions of ``opentelemetry-instrumentation-openai-v2`` (newer
  ``gen_ai.input.messages`` attributes, or older ``gen_ai.*.message`` events) or OpenInference's
  ``llm.input_messages`` (:mod:`.conventions`);
- plain JSON-lines chat logs, ``{"messages": [...]}`` a line (:mod:`.chatlog`).

The user says where the task is (:mod:`.selectors`). Bad input is one line naming the file, the
line and the field (:class:`TraceFormatError`). Ids and timestamps group and order calls only:
they are never in a task or a call's messages.
"""

from marft_envs.programs.traces.chatlog import ChatLogFields
from marft_envs.programs.traces.loader import (
    FORMATS,
    LoadSummary,
    TraceTasks,
    load_trace_tasks,
    read_trace_calls,
    read_traces,
    split_trace_tasks,
)
from marft_envs.programs.traces.records import RecordedCall, RecordedTrace, TraceFormatError
from marft_envs.programs.traces.selectors import Selector

__all__ = [
    "FORMATS",
    "ChatLogFields",
    "LoadSummary",
    "RecordedCall",
    "RecordedTrace",
    "Selector",
    "TraceFormatError",
    "TraceTasks",
    "load_trace_tasks",
    "read_trace_calls",
    "read_traces",
    "split_trace_tasks",
]
