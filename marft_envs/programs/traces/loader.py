"""Recorded traces in: episodes read from files, their calls, and the task each one holds."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from marft_envs.programs.tasks import TaskList, split_tasks
from marft_envs.programs.traces.chatlog import ChatLogFields, is_chat_record, read_chat_log
from marft_envs.programs.traces.conventions import call_messages, is_model_call, recorded_model
from marft_envs.programs.traces.otlp import LogEvent, Span, is_otlp, read_otlp
from marft_envs.programs.traces.records import (
    AgentNames,
    RecordedCall,
    RecordedTrace,
    TraceFormatError,
    agent_name,
)
from marft_envs.programs.traces.selectors import Selector, check_selector, select

__all__ = [
    "FORMATS",
    "LoadSummary",
    "TraceTasks",
    "load_trace_tasks",
    "read_trace_calls",
    "read_traces",
    "split_trace_tasks",
]

logger = logging.getLogger(__name__)

#: The formats a file may be read as (``"auto"``: told from its first record).
FORMATS = ("auto", "otlp", "chat")

Paths = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]

#: Span attributes that name the agent a call belongs to, on it or its nearest ancestor.
AGENT_ATTRIBUTES = ("gen_ai.agent.name", "agent.name")


@dataclass(frozen=True)
class LoadSummary:
    """What :func:`load_trace_tasks` read and kept (logged in one line, too)."""

    files: int
    traces: int
    tasks: int
    duplicates: int
    """Tasks dropped because an earlier trace held the same one."""
    skipped: int
    """Traces without the selected field (``missing="skip"``)."""


class TraceTasks(TaskList):
    """The tasks of recorded traces: a :class:`~marft_envs.programs.tasks.TaskList` (a run
    records their count and sha256, not the tasks) with the :class:`LoadSummary` of the load."""

    summary: LoadSummary


def _files(paths: Paths) -> list[Path]:
    given = [paths] if isinstance(paths, str | os.PathLike) else list(paths)
    if not given:
        raise ValueError("no trace files given; pass a path, a folder or a list of them.")
    files: list[Path] = []
    for item in given:
        path = Path(item)
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.suffix in (".json", ".jsonl"))
            if not found:
                raise FileNotFoundError(f"{path} holds no .json or .jsonl file of traces.")
            files += found
        elif path.is_file():
            files.append(path)
        else:
            raise FileNotFoundError(
                f"{path} is not a file nor a folder; pass recorded trace files."
            )
    return files


def _first_record(path: Path) -> tuple[int, Any]:
    text = path.read_text(encoding="utf-8")
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                return number, json.loads(line)
            except json.JSONDecodeError:
                break
    try:
        return 1, json.loads(text)
    except json.JSONDecodeError as err:
        raise TraceFormatError(
            f"{path}:{err.lineno}",
            "",
            f"not JSON ({err.msg}); give OTLP JSON or a JSON-lines chat log.",
        ) from None


def file_format(path: Path, fields: ChatLogFields) -> str:
    """``"otlp"`` or ``"chat"``, told from the file's first record."""
    number, record = _first_record(path)
    if is_otlp(record):
        return "otlp"
    if is_chat_record(record, fields):
        return "chat"
    keys = sorted(record)[:6] if isinstance(record, dict) else type(record).__name__
    raise TraceFormatError(
        f"{path}:{number}",
        "format",
        f"unknown (found {keys}): an OTLP export "
        f"request has resourceSpans, a chat-log record {fields.messages!r}; "
        f"pass format='otlp' or 'chat', or ChatLogFields(messages=...).",
    )


def _agent(span: Span, by_id: dict[str, Span], agents: AgentNames) -> str:
    node: Span | None = span
    while node is not None:
        for key in AGENT_ATTRIBUTES:
            value = node.attributes.get(key)
            if isinstance(value, str) and value:
                return agent_name(value, agents)
        node = by_id.get(node.parent_id) if node.parent_id else None
    model = recorded_model(span)
    if model is None:
        raise TraceFormatError(
            span.where,
            "gen_ai.request.model",
            "missing, and no gen_ai.agent.name on the span or above it: the call names no agent.",
        )
    return agent_name(model, agents)


def _otlp_reader(agents: AgentNames):  # type: ignore[no-untyped-def]
    def read(trace: RecordedTrace) -> list[RecordedCall]:
        by_id = {span.span_id: span for span in trace.spans}
        calls = []
        for span in sorted(trace.spans, key=lambda s: s.start):
            if is_model_call(span):
                messages, output, reason = call_messages(span)
                calls.append(
                    RecordedCall(
                        _agent(span, by_id, agents),
                        messages,
                        output,
                        recorded_model(span),
                        reason,
                        span.where,
                    )
                )
        return calls

    return read


def _otlp_traces(
    spans: list[Span], logs: list[LogEvent], agents: AgentNames
) -> list[RecordedTrace]:
    traces: dict[str, RecordedTrace] = {}
    reader = _otlp_reader(agents)
    for span in spans:
        if span.trace_id not in traces:
            traces[span.trace_id] = RecordedTrace(span.trace_id, span.where, read_calls=reader)
        traces[span.trace_id].spans.append(span)
    by_id = {(s.trace_id, s.span_id): s for s in spans}
    for event in sorted(logs, key=lambda e: e.time):
        owner = by_id.get((event.trace_id, event.span_id))
        if owner is not None:
            owner.logs.append(event)
    return list(traces.values())


def read_traces(
    paths: Paths,
    *,
    format: str = "auto",
    agents: AgentNames = None,
    fields: ChatLogFields | None = None,
) -> list[RecordedTrace]:
    """Every recorded episode in ``paths``, in the order they first appear (calls read lazily).

    OTLP spans and log events are grouped by trace id across all the files given, so a trace's
    spans and its logs may be in different files.
    """
    if format not in FORMATS:
        raise ValueError(f"format={format!r} is not one of {FORMATS}.")
    fields = fields or ChatLogFields()
    spans: list[Span] = []
    logs: list[LogEvent] = []
    chats: list[RecordedTrace] = []
    for path in _files(paths):
        kind = file_format(path, fields) if format == "auto" else format
        if kind == "otlp":
            found, events = read_otlp(path)
            spans += found
            logs += events
        else:
            chats += read_chat_log(path, fields, agents)
    return _otlp_traces(spans, logs, agents) + chats


def read_trace_calls(
    paths: Paths,
    *,
    format: str = "auto",
    agents: AgentNames = None,
    fields: ChatLogFields | None = None,
) -> list[RecordedTrace]:
    """The recorded model calls of each episode, for a supervised warm start.

    Args:
        paths: OTLP JSON files, JSON-lines chat logs, folders of them, or a list.
        format: ``"otlp"``, ``"chat"``, or ``"auto"`` (told from each file's first record).
        agents: Maps a recorded name (``gen_ai.agent.name``, else the request model; a chat
            record's agent field) to the team's agent: a dict or a function.
        fields: The field names of chat-log records.

    Returns:
        The episodes that made at least one model call, each a :class:`RecordedTrace` whose
        ``calls`` are :class:`RecordedCall` s (``agent``, ``messages``, ``output``) in order.

    Raises:
        TraceFormatError: A malformed file, span or record, or a call with no message content;
            one line naming the file, the line and the field.
    """
    traces = read_traces(paths, format=format, agents=agents, fields=fields)
    return [trace for trace in traces if trace.calls]


def load_trace_tasks(
    paths: Paths,
    *,
    task: Selector = "first_user_message",
    format: str = "auto",
    missing: str = "error",
    agents: AgentNames = None,
    fields: ChatLogFields | None = None,
) -> TraceTasks:
    """The tasks recorded traces hold, one per trace, for ``register_program(tasks=...)``.

    Args:
        paths: OTLP JSON files, JSON-lines chat logs, folders of them, or a list.
        task: Where each trace holds its task (:mod:`~marft_envs.programs.traces.selectors`):
            ``"first_user_message"``, ``"root:ATTRIBUTE"``, ``"span:NAME:ATTRIBUTE"``,
            ``"record:PATH"``, a function of the :class:`RecordedTrace`, or a dict of them.
        format: ``"otlp"``, ``"chat"``, or ``"auto"``.
        missing: A trace without the selected field is an ``"error"`` or is ``"skip"`` ped
            (counted in the summary).
        agents: Maps recorded names to the team's agents (seen by a function selector).
        fields: The field names of chat-log records.

    Returns:
        The tasks in the order their traces first appear, each once: a duplicate of an earlier
        task is dropped and counted (``.summary``, and one logged line).

    Raises:
        TraceFormatError: Bad input, in one line naming the file, the line and the field.
        ValueError: A malformed selector, an unknown ``format`` or ``missing``, or no task found.
    """
    check_selector(task)
    if missing not in ("error", "skip"):
        raise ValueError(f"missing={missing!r} must be 'error' or 'skip'.")
    files = _files(paths)
    traces = read_traces(files, format=format, agents=agents, fields=fields)
    tasks: list[Any] = []
    seen: set[str] = set()
    duplicates = skipped = 0
    for trace in traces:
        try:
            value = select(trace, task)
        except LookupError as lookup:
            if missing == "error":
                raise lookup.args[0] from None
            value = None
        if value is None:
            if missing == "error":
                raise TraceFormatError(
                    trace.where,
                    "task",
                    f"the task function returned None "
                    f"for trace {trace.episode[:8]}…; pass missing='skip' to "
                    f"leave such traces out.",
                )
            skipped += 1
            continue
        key = json.dumps(value, sort_keys=True, ensure_ascii=False, default=repr)
        if key in seen:
            duplicates += 1
            continue
        seen.add(key)
        tasks.append(value)
    if not tasks:
        raise ValueError(
            f"no task found in the {len(traces)} traces of {len(files)} files "
            f"({skipped} without the selected field {task!r:.60})."
        )
    out = TraceTasks(tasks)
    out.summary = LoadSummary(len(files), len(traces), len(tasks), duplicates, skipped)
    logger.info(
        "Loaded %d tasks from %d traces in %d files: %d duplicates dropped, %d traces skipped.",
        len(tasks),
        len(traces),
        len(files),
        duplicates,
        skipped,
    )
    return out


def split_trace_tasks(
    tasks: Sequence[Any], *, test_size: float | int = 0.2, seed: int = 0
) -> tuple[TaskList, TaskList]:
    """``(train, test)``: a seeded held-out share of ``tasks`` (no task on both sides), the split
    ``register_program`` makes by itself when ``test_tasks`` is left out; give the two as
    ``tasks=`` and ``test_tasks=`` to fix them, e.g. as the scenario set of ``marft eval``."""
    train = split_tasks(tasks, None, "train", test_size=test_size, seed=seed)  # type: ignore[arg-type]
    test = split_tasks(tasks, None, "test", test_size=test_size, seed=seed)  # type: ignore[arg-type]
    return TaskList(train), TaskList(test)
