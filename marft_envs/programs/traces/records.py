"""What a recorded trace holds once read: its model calls, in order, and where each came from.

A :class:`RecordedTrace` is one episode of a team as it ran in production: one OpenTelemetry
trace, or one conversation of a chat log. Its :class:`RecordedCall` s are the model calls the
team made, each with the agent that made it, the messages it was sent and the message it
returned. Ids and timestamps are kept only to group and order calls; they are never part of a
call's messages nor of a task.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

__all__ = ["AgentNames", "RecordedCall", "RecordedTrace", "TraceFormatError", "agent_name"]

#: How a recorded name (``gen_ai.agent.name``, else the request model) becomes a team's agent:
#: a mapping (names it lacks stay as they are) or a function of the name.
AgentNames = Mapping[str, str] | Callable[[str], str] | None


class TraceFormatError(ValueError):
    """A recorded trace or chat log the loader cannot read, said in one line: the file, the line,
    the field, what is wrong and how to fix it."""

    def __init__(self, where: str, field: str, problem: str) -> None:
        self.where = where
        self.field = field
        super().__init__(f"{where}: {field}: {problem}" if field else f"{where}: {problem}")


@dataclass(frozen=True)
class RecordedCall:
    """One recorded model call.

    Attributes:
        agent: The agent that made it: ``gen_ai.agent.name`` (or OpenInference ``agent.name``) of
            the call's span or its nearest ancestor, else the request model (``gen_ai.request.model``,
            ``llm.model_name``); in a chat log the record's agent field; then the ``agents`` mapping.
        messages: The messages it was sent, OpenAI chat style (``{"role", "content"}``, plus
            ``tool_calls``/``tool_call_id`` where recorded), system instructions first.
        output: The message it returned (``{"role": "assistant", "content", ...}``).
        model: The model it asked for, when recorded.
        finish_reason: Why generation stopped, when recorded.
        where: ``file:line`` of the span or record, for messages.
    """

    agent: str
    messages: list[dict[str, Any]]
    output: dict[str, Any]
    model: str | None = None
    finish_reason: str | None = None
    where: str = ""

    @property
    def reply(self) -> str:
        """The text of the returned message (empty when it holds only tool calls)."""
        content = self.output.get("content")
        return content if isinstance(content, str) else ""


@dataclass
class RecordedTrace:
    """One recorded episode: its calls in the order they started, and what it was read from.

    Attributes:
        episode: The trace id (OTLP) or conversation id (chat log); used to group calls, never
            part of a task.
        where: ``file:line`` of its first span or record.
        spans: Its spans (:class:`~marft_envs.programs.traces.otlp.Span`), empty for a chat log.
        records: Its chat-log records in file order, empty for OTLP.
        record_where: ``file:line`` of each record.
        messages_field: The records' field of chat messages (:class:`ChatLogFields`).
    """

    episode: str
    where: str
    spans: list[Any] = field(default_factory=list)
    records: list[Mapping[str, Any]] = field(default_factory=list)
    record_where: list[str] = field(default_factory=list)
    messages_field: str = "messages"
    read_calls: Callable[[RecordedTrace], list[RecordedCall]] | None = field(
        default=None, repr=False, compare=False
    )

    @cached_property
    def calls(self) -> list[RecordedCall]:
        """The model calls, read on first use (a trace whose task is a root attribute need not
        have recorded message content)."""
        return [] if self.read_calls is None else self.read_calls(self)

    def root(self) -> Any:
        """The root span (OTLP only).

        Raises:
            TraceFormatError: A chat log, no root span (every span has a parent: the root was
                not exported, or is in a file not given), or more than one.
        """
        if not self.spans:
            raise TraceFormatError(
                self.where,
                "root",
                "a chat log has no spans; select a record field instead "
                "(task='record:PATH') or the first user message (task='first_user_message').",
            )
        known = {s.span_id for s in self.spans}
        roots = [s for s in self.spans if not s.parent_id or s.parent_id not in known]
        top = [s for s in roots if not s.parent_id]
        if len(top) == 1:
            return top[0]
        if not top:
            raise TraceFormatError(
                self.where,
                "parentSpanId",
                f"trace {self.episode[:8]}… has no root span (each "
                f"of its {len(self.spans)} spans has a parentSpanId): give the file that holds "
                f"its root too, or select a span by name (task='span:NAME:ATTRIBUTE').",
            )
        names = ", ".join(repr(s.name) for s in top[:4])
        raise TraceFormatError(
            self.where,
            "parentSpanId",
            f"trace {self.episode[:8]}… has {len(top)} root spans "
            f"({names}); select one by name (task='span:NAME:ATTRIBUTE').",
        )


def agent_name(name: str, agents: AgentNames) -> str:
    """``name`` as the team calls that agent, through the user's ``agents`` mapping."""
    if agents is None:
        return name
    if callable(agents):
        return str(agents(name))
    return str(agents.get(name, name))


def message_text(content: Any) -> str | None:
    """The text of a message's ``content``: a string, or the text parts of a list of parts
    (OpenAI ``{"type": "text", "text"}``, GenAI ``{"type": "text", "content"}``) joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence) and not isinstance(content, bytes):
        texts = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, Mapping) and part.get("type", "text") == "text":
                text = part.get("text", part.get("content"))
                if isinstance(text, str):
                    texts.append(text)
        return "".join(texts) if texts else None
    return None
