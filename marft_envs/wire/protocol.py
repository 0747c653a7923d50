"""The OpenAI chat-completions wire format as typed objects: the response a call gets, the reply
it is built from, the bounds on a request, and the errors a request is refused with.

Every route that speaks the format shares these: the in-process
:class:`~marft_envs.programs.ProgramClient`, the training endpoint
(:mod:`marft_envs.programs.server`) and ``marft serve`` (:mod:`marft_algos.serving`). Field names
are the ``openai`` package's, so agent code reads a response the same way whichever route it came
through.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = [
    "ChatCompletion",
    "Choice",
    "Function",
    "Message",
    "Reply",
    "RequestLimits",
    "RequestRefused",
    "ToolCall",
    "UnknownAgentError",
    "Usage",
    "completion",
    "without_none",
]


class UnknownAgentError(LookupError):
    """A call named a ``model`` that is not an agent of the team (the message lists the agents)."""


class RequestRefused(ValueError):
    """A request past one of the :class:`RequestLimits` (or not one an OpenAI client sends).
    ``status`` is the HTTP status an endpoint answers with; ``kind`` names the program error the
    episode is counted as (None: refused without counting, e.g. malformed JSON)."""

    def __init__(
        self,
        message: str,
        *,
        status: int,
        code: str | None = None,
        kind: str | None = None,
        error_type: str = "invalid_request_error",
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.kind, self.error_type = status, code, kind, error_type

    def __reduce__(self) -> tuple[Any, ...]:  # crosses the pipe of isolation="process"
        return (_refused, (str(self), self.status, self.code, self.kind, self.error_type))


def _refused(
    message: str, status: int, code: str | None, kind: str | None, error_type: str
) -> RequestRefused:
    return RequestRefused(message, status=status, code=code, kind=kind, error_type=error_type)


@dataclass(frozen=True)
class RequestLimits:
    """What one call may carry, and how many calls of one episode may wait at once. A request
    past a bound is refused (HTTP 413, 400 or 429 over an endpoint; :class:`RequestRefused` in
    process); on the training endpoint its episode is counted as a program error. The defaults
    are far above what a team sends.

    The one type of these bounds: ``register_program``'s flat keywords (``max_request_bytes=``,
    ``max_messages=``, ``max_concurrent_calls=``) build one, and ``marft serve`` takes one
    (``--max-body-bytes``, ``--max-messages``).
    """

    max_request_bytes: int = 4 * 2**20
    """Bytes of one request body (in process: characters of its messages and tools)."""
    max_messages: int = 1024
    """Messages in one request."""
    max_concurrent_calls: int = 16
    """Calls of one episode waiting for their replies at once (``marft serve`` has no episodes
    and does not use it)."""

    def __post_init__(self) -> None:
        for name in ("max_request_bytes", "max_messages", "max_concurrent_calls"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}.")


@dataclass
class Function:
    """``tool_calls[i].function``, as the ``openai`` package has it."""

    name: str
    arguments: str  # a JSON object, as text


@dataclass
class ToolCall:
    """One entry of ``message.tool_calls``."""

    id: str
    function: Function
    type: str = "function"


@dataclass
class Message:
    """The assistant message of a choice (``openai``'s ``ChatCompletionMessage`` fields)."""

    content: str | None
    role: str = "assistant"
    tool_calls: list[ToolCall] | None = None
    refusal: str | None = None


@dataclass
class Choice:
    index: int
    message: Message
    # "stop" (the model ended its message), "length" (cut at the budget) or "tool_calls"
    finish_reason: str
    logprobs: Any = None


@dataclass
class Usage:
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


@dataclass
class ChatCompletion:
    """What ``create`` returns (the fields of ``openai.types.chat.ChatCompletion`` agent code reads)."""

    id: str
    model: str
    choices: list[Choice]
    usage: Usage
    created: int = 0
    object: str = "chat.completion"

    def model_dump(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Reply:
    """What a call is answered with: the generated text, how it ended, its token counts, and
    (for a call with tools) the text parsed into content and tool calls."""

    text: str
    finished: bool
    prompt_tokens: int
    completion_tokens: int
    content: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)


_ids = itertools.count()


def completion(agent: str, reply: Reply) -> ChatCompletion:
    """The response object of one call."""
    if reply.tool_calls:
        message = Message(content=reply.content, tool_calls=list(reply.tool_calls))
        finish = "tool_calls"
    else:
        message, finish = Message(content=reply.text), "stop" if reply.finished else "length"
    tokens = reply.prompt_tokens + reply.completion_tokens
    return ChatCompletion(
        id=f"chatcmpl-marft-{next(_ids)}",
        model=agent,
        choices=[Choice(index=0, message=message, finish_reason=finish)],
        usage=Usage(reply.prompt_tokens, reply.completion_tokens, tokens),
    )


def without_none(value: Any) -> Any:
    """The response as the OpenAI API writes it: ``tool_calls`` absent rather than null."""
    if isinstance(value, dict):
        return {k: without_none(v) for k, v in value.items() if v is not None or k == "content"}
    if isinstance(value, list):
        return [without_none(v) for v in value]
    return value
