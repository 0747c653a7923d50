"""The chat client an agent program receives: the ``openai`` surface agent code uses.

``client.chat.completions.create(model=AGENT, messages=[...])`` hands the call to the env that runs
the program (one AEC step of ``AGENT``) and returns what the policy generated, shaped like the
``openai`` package's ``ChatCompletion``: ``choices[0].message.content``, ``choices[0].message.tool_calls``,
``choices[0].finish_reason``, ``usage``. The same object serves ``async def`` programs: ``await
client.chat.completions.acreate(...)``, or hand ``client.aio`` where code expects an ``AsyncOpenAI``.

What the request's sampling fields mean here: the trainer samples every rollout with its own
settings (temperature, top-p, top-k, each agent's ``max_new_tokens``) and evaluates greedily, so
``temperature``, ``top_p``, ``max_tokens``, ``stop`` and ``seed`` are accepted and ignored; what
was trained on is exactly what was generated. Streaming and ``n > 1`` are refused with a clear
error (docs/programs.md).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "ChatCompletion",
    "Choice",
    "EpisodeEnded",
    "Message",
    "ProgramClient",
    "UnknownAgentError",
    "Usage",
]


class UnknownAgentError(LookupError):
    """A call named a ``model`` that is not an agent of the team (the message lists the agents)."""


class EpisodeEnded(RuntimeError):
    """A call arrived after the env ended the episode (timeout, call budget, or ``close()``)."""


@dataclass
class Message:
    """The assistant message of a choice (``openai``'s ``ChatCompletionMessage`` fields)."""

    content: str | None
    role: str = "assistant"
    tool_calls: list[Any] | None = None
    refusal: str | None = None


@dataclass
class Choice:
    index: int
    message: Message
    finish_reason: str  # "stop" (the model ended its message) or "length" (cut at the budget)
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


def check_request(
    agents: Sequence[str], model: Any, messages: Any, fields: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """Validate one chat-completions request; return its messages as plain dicts.

    Raises:
        UnknownAgentError: ``model`` is not an agent of the team.
        ValueError / TypeError: A request marft cannot serve exactly (streaming, ``n > 1``, tools
            without a parser, malformed messages), with what to do instead.
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
    if fields.get("tools"):
        raise ValueError(
            "tools= is not supported by the in-process client yet: tool calls need a parser for the "
            "model's tool-call format. Describe the tools in the system prompt and parse the reply "
            "in the program instead."
        )
    unknown = sorted(set(fields) - IGNORED_FIELDS - {"stream", "n", "tools"})
    if unknown:
        raise TypeError(f"create() got unexpected keyword argument(s) {unknown}.")
    if not isinstance(messages, Sequence) or isinstance(messages, str) or not messages:
        raise TypeError(
            f"messages must be a non-empty list of {{'role': ..., 'content': ...}} dicts, got "
            f"{messages!r:.80}."
        )
    plain = []
    for i, message in enumerate(messages):
        item = message if isinstance(message, Mapping) else getattr(message, "__dict__", None)
        if not isinstance(item, Mapping) or "role" not in item:
            raise TypeError(
                f"messages[{i}] must be a dict with 'role' and 'content', got {message!r:.80}."
            )
        content = item.get("content")
        if not isinstance(content, str):
            raise TypeError(
                f"messages[{i}]['content'] must be text, got {type(content).__name__}: marft renders "
                f"plain text messages with the policy's chat template."
            )
        plain.append({"role": str(item["role"]), "content": content})
    return plain


def completion(
    agent: str, text: str, finished: bool, prompt_tokens: int, completion_tokens: int
) -> ChatCompletion:
    """The response object of one call."""
    return ChatCompletion(
        id=f"chatcmpl-marft-{next(_ids)}",
        model=agent,
        choices=[
            Choice(
                index=0,
                message=Message(content=text),
                finish_reason="stop" if finished else "length",
            )
        ],
        usage=Usage(prompt_tokens, completion_tokens, prompt_tokens + completion_tokens),
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
        send: Callable[[CallRecord], tuple[str, bool, int, int]],
        rng: np.random.Generator,
    ) -> None:
        self.agents = tuple(agents)
        self.rng = rng
        self.counts = Counts()
        self._send = send
        self._calls = itertools.count()
        completions = _Completions(self)
        self.chat = _Chat(completions)
        self.aio = _AsyncClient(completions)

    def _call(self, model: Any, messages: Any, fields: Mapping[str, Any]) -> ChatCompletion:
        plain = check_request(self.agents, model, messages, fields)
        text, finished, prompt_tokens, completion_tokens = self._send(
            CallRecord(agent=model, messages=plain, index=next(self._calls))
        )
        self.counts.add(model, prompt_tokens, completion_tokens)
        return completion(model, text, finished, prompt_tokens, completion_tokens)
