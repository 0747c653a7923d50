"""The chat client an agent program receives: the ``openai`` surface agent code uses.

``client.chat.completions.create(model=AGENT, messages=[...])`` hands the call to the env that runs
the program (one AEC step of ``AGENT``) and returns what the policy generated, shaped like the
``openai`` package's ``ChatCompletion``: ``choices[0].message.content``, ``choices[0].message.tool_calls``,
``choices[0].finish_reason``, ``usage``. The same object serves ``async def`` programs: ``await
client.chat.completions.acreate(...)``, or hand ``client.aio`` where code expects an ``AsyncOpenAI``.

What the request's sampling fields mean here: the trainer samples every rollout with its own
settings (temperature, top-p, top-k, each agent's ``max_new_tokens``) and evaluates greedily, so
``temperature``, ``top_p``, ``max_tokens``, ``stop``, ``seed`` and ``tool_choice`` are accepted and
ignored; what was trained on is exactly what was generated. ``tools`` reach the policy with the
messages, and the reply is parsed into ``tool_calls`` (:mod:`marft_envs.programs.tools`); messages
may carry ``tool_calls`` and ``role="tool"`` results, as dicts or as the message objects this
client returned. Streaming and ``n > 1`` are refused with a clear error (docs/programs.md).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from marft_envs.programs.tools import ToolCall

__all__ = [
    "ChatCompletion",
    "Choice",
    "EpisodeEnded",
    "Message",
    "ProgramClient",
    "Reply",
    "RequestLimits",
    "RequestRefused",
    "UnknownAgentError",
    "Usage",
    "loopback_http_client",
]


class UnknownAgentError(LookupError):
    """A call named a ``model`` that is not an agent of the team (the message lists the agents)."""


class EpisodeEnded(RuntimeError):
    """A call arrived after the env ended the episode (timeout, call budget, or ``close()``)."""


class RequestRefused(ValueError):
    """A request past one of the episode's :class:`RequestLimits` (or not one an OpenAI client
    sends). ``status`` is the HTTP status the endpoint answers with; ``kind`` names the program
    error the episode is counted as (None: refused without counting, e.g. malformed JSON)."""

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
    past a bound is refused (HTTP 413, 400 or 429 over the endpoint; :class:`RequestRefused` in
    process) and its episode counted as a program error; the defaults are far above what a team
    sends."""

    max_request_bytes: int = 4 * 2**20
    """Bytes of one request body (in process: characters of its messages and tools)."""
    max_messages: int = 1024
    """Messages in one request."""
    max_concurrent_calls: int = 16
    """Calls of one episode waiting for their replies at once."""

    def __post_init__(self) -> None:
        for name in ("max_request_bytes", "max_messages", "max_concurrent_calls"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}.")


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
class CallRecord:
    """One model call of a program, as the env received it."""

    agent: str
    messages: list[dict[str, Any]]
    index: int  # call number in the episode, from 0
    tools: list[dict[str, Any]] | None = None


@dataclass
class Reply:
    """What the env answers a call with: the generated text, how it ended, its token counts, and
    (for a call with tools) the text parsed into content and tool calls."""

    text: str
    finished: bool
    prompt_tokens: int
    completion_tokens: int
    content: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)


@dataclass
class Counts:
    """What cost terms need, per agent: calls, prompt tokens and completion tokens."""

    calls: dict[str, int] = field(default_factory=dict)
    prompt_tokens: dict[str, int] = field(default_factory=dict)
    completion_tokens: dict[str, int] = field(default_factory=dict)

    def add(self, agent: str, prompt_tokens: int, completion_tokens: int) -> None:
        self.calls[agent] = self.calls.get(agent, 0) + 1
        self.prompt_tokens[agent] = self.prompt_tokens.get(agent, 0) + prompt_tokens
        self.completion_tokens[agent] = self.completion_tokens.get(agent, 0) + completion_tokens


#: Request fields accepted and ignored: the trainer's rollout settings decide how to sample.
IGNORED_FIELDS = frozenset(
    {
        "temperature",
        "top_p",
        "max_tokens",
        "max_completion_tokens",
        "stop",
        "seed",
        "presence_penalty",
        "frequency_penalty",
        "user",
        "metadata",
        "store",
        "logprobs",
        "top_logprobs",
        "timeout",
        "extra_headers",
        "extra_body",
        "parallel_tool_calls",
        "response_format",
        "tool_choice",
    }
)

_ids = itertools.count()


def _plain(value: Any) -> Any:
    """Dicts and lists all the way down (dataclasses and pydantic models included)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = asdict(value)
    elif hasattr(value, "model_dump"):
        value = value.model_dump(exclude_none=True)
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items() if v is not None}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _text(content: Any, where: str) -> str:
    """A message's text: a string, None (an assistant message that only calls tools), or a list
    of ``{"type": "text", "text": ...}`` parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(
        isinstance(p, Mapping) and p.get("type") == "text" and isinstance(p.get("text"), str)
        for p in content
    ):
        return "".join(p["text"] for p in content)
    raise TypeError(
        f"{where} must be text (or a list of text parts), got {type(content).__name__}: marft "
        f"renders text messages with the policy's chat template."
    )


def _tool_calls(calls: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(calls, list):
        raise TypeError(f"{where} must be a list of tool calls, got {calls!r:.80}.")
    out = []
    for k, call in enumerate(calls):
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
            raise TypeError(
                f"{where}[{k}] must be {{'id': ..., 'type': 'function', 'function': {{'name': ..., "
                f"'arguments': ...}}}}, got {call!r:.80}."
            )
        out.append(
            {
                "id": str(call.get("id", f"call_{k}")),
                "type": "function",
                "function": {
                    "name": function["name"],
                    "arguments": function.get("arguments", "{}"),
                },
            }
        )
    return out


def _tools(tools: Any) -> list[dict[str, Any]] | None:
    if not tools:
        return None
    if not isinstance(tools, list) or not all(
        isinstance(t, Mapping)
        and t.get("type", "function") == "function"
        and isinstance(t.get("function"), Mapping)
        and isinstance(t["function"].get("name"), str)
        for t in tools
    ):
        raise TypeError(
            f"tools must be a list of {{'type': 'function', 'function': {{'name': ..., "
            f"'description': ..., 'parameters': {{...}}}}}}, got {tools!r:.120}."
        )
    return [{"type": "function", "function": dict(t["function"])} for t in tools]


def check_request(
    agents: Sequence[str],
    model: Any,
    messages: Any,
    fields: Mapping[str, Any],
    limits: RequestLimits | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """Validate one chat-completions request; return its messages as plain dicts, and its tools.

    Raises:
        UnknownAgentError: ``model`` is not an agent of the team.
        RequestRefused: More messages than ``limits.max_messages``.
        ValueError / TypeError: A request marft cannot serve exactly (streaming, ``n > 1``,
            malformed messages or tools), with what to do instead.
    """
    if model not in agents:
        raise UnknownAgentError(
            f"model={model!r} is not an agent of this team; the agents are {list(agents)}. Name the "
            f"agent that speaks as the model (e.g. model={agents[0]!r})."
        )
    if fields.get("stream"):
        raise ValueError(
            "stream=True is not supported: marft trains on the ids it generated, and returns each "
            "message whole. Call without stream."
        )
    n = fields.get("n", 1)
    if n not in (None, 1):
        raise ValueError(
            f"n={n} is not supported: each call is one decision of one agent. Make n separate calls."
        )
    tools = _tools(_plain(fields.get("tools")))
    unknown = sorted(set(fields) - IGNORED_FIELDS - {"stream", "n", "tools"})
    if unknown:
        raise TypeError(f"create() got unexpected keyword argument(s) {unknown}.")
    if not isinstance(messages, Sequence) or isinstance(messages, str) or not messages:
        raise TypeError(
            f"messages must be a non-empty list of {{'role': ..., 'content': ...}} dicts, got "
            f"{messages!r:.80}."
        )
    if limits is not None and len(messages) > limits.max_messages:
        raise RequestRefused(
            f"the request has {len(messages)} messages, more than max_messages="
            f"{limits.max_messages}; send fewer, or raise max_messages where the program is "
            f"registered.",
            status=400,
            code="too_many_messages",
            kind="TooManyMessages",
        )
    plain = []
    for i, message in enumerate(messages):
        item = _plain(message)
        if not isinstance(item, Mapping) or "role" not in item:
            raise TypeError(
                f"messages[{i}] must be a dict with 'role' and 'content', got {message!r:.80}."
            )
        role = str(item["role"])
        entry: dict[str, Any] = {
            "role": role,
            "content": _text(item.get("content"), f"messages[{i}]['content']"),
        }
        if item.get("tool_calls"):
            entry["tool_calls"] = _tool_calls(item["tool_calls"], f"messages[{i}]['tool_calls']")
        if role == "tool":
            entry["tool_call_id"] = str(item.get("tool_call_id", ""))
        if isinstance(item.get("name"), str) and role == "tool":
            entry["name"] = item["name"]
        plain.append(entry)
    return plain, tools


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


class _Completions:
    def __init__(self, client: ProgramClient) -> None:
        self._client = client

    def create(self, *, model: str, messages: Sequence[Any], **fields: Any) -> ChatCompletion:
        """One model call: the agent named by ``model`` answers ``messages``."""
        return self._client._call(model, messages, fields)

    async def acreate(
        self, *, model: str, messages: Sequence[Any], **fields: Any
    ) -> ChatCompletion:
        """:meth:`create` for ``async def`` programs (calls of one episode may overlap)."""
        import asyncio

        return await asyncio.to_thread(self._client._call, model, messages, fields)


class _AsyncCompletions:
    def __init__(self, completions: _Completions) -> None:
        self._completions = completions

    async def create(self, *, model: str, messages: Sequence[Any], **fields: Any) -> ChatCompletion:
        return await self._completions.acreate(model=model, messages=messages, **fields)


class _Chat:
    def __init__(self, completions: Any) -> None:
        self.completions = completions


class _AsyncClient:
    """``client.aio``: the ``AsyncOpenAI`` surface (``await aio.chat.completions.create(...)``)."""

    def __init__(self, completions: _Completions) -> None:
        self.chat = _Chat(_AsyncCompletions(completions))


class ProgramClient:
    """The client a program receives for one episode.

    Attributes:
        chat: ``chat.completions.create(model=AGENT, messages=...)``, as ``openai.OpenAI`` has it.
        aio: The same calls as coroutines, as ``openai.AsyncOpenAI`` has them.
        agents: The team's agents (the valid ``model`` names).
        rng: The episode's random generator, seeded by the env: draw the program's own randomness
            from it so that a seeded episode repeats.
        counts: Calls, prompt tokens and completion tokens per agent so far (for cost terms).
        base_url: None in process (a server-backed client has the episode's URL here).
    """

    base_url: str | None = None

    def __init__(
        self,
        agents: Sequence[str],
        send: Callable[[CallRecord], Reply],
        rng: np.random.Generator,
        limits: RequestLimits | None = None,
        refused: Callable[[str, str], None] | None = None,
    ) -> None:
        self.agents = tuple(agents)
        self.rng = rng
        self.counts = Counts()
        self._send = send
        self._limits = limits or RequestLimits()
        self._refused = refused
        self._calls = itertools.count()
        completions = _Completions(self)
        self.chat = _Chat(completions)
        self.aio = _AsyncClient(completions)

    def _call(self, model: Any, messages: Any, fields: Mapping[str, Any]) -> ChatCompletion:
        try:
            plain, tools = check_request(self.agents, model, messages, fields, self._limits)
            size = request_size(plain, tools)
            if size > self._limits.max_request_bytes:
                raise RequestRefused(
                    f"the request holds {size} characters, more than max_request_bytes="
                    f"{self._limits.max_request_bytes}; send less, or raise max_request_bytes "
                    f"where the program is registered.",
                    status=413,
                    code="request_too_large",
                    kind="RequestTooLarge",
                )
        except RequestRefused as err:
            if err.kind is not None and self._refused is not None:
                self._refused(err.kind, str(err))
            raise
        reply = self._send(CallRecord(model, plain, next(self._calls), tools))
        self.counts.add(model, reply.prompt_tokens, reply.completion_tokens)
        return completion(model, reply)


def request_size(messages: Sequence[Mapping[str, Any]], tools: Sequence[Any] | None) -> int:
    """Characters of a request's message contents, tool calls and tools (what the in-process
    client bounds with ``max_request_bytes``)."""
    size = sum(len(m.get("content") or "") for m in messages)
    size += sum(len(repr(m["tool_calls"])) for m in messages if "tool_calls" in m)
    return size + (len(repr(tools)) if tools else 0)


def loopback_http_client() -> Any:
    """The HTTP connection pool of an ``openai`` client on the local endpoint: no timeout (the
    env bounds episodes), and no TLS context, whose CA bundle costs about 40 ms to load and which
    a ``http://127.0.0.1`` URL never uses."""
    import openai

    return openai.DefaultHttpxClient(timeout=None, verify=False)
