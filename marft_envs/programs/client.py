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
messages, and the reply is parsed into ``tool_calls`` (:mod:`marft_envs.wire.tools`); messages
may carry ``tool_calls`` and ``role="tool"`` results, as dicts or as the message objects this
client returned. Streaming and ``n > 1`` are refused with a clear error (docs/programs.md).

``client.responses.create(model=AGENT, input=..., instructions=..., tools=...)`` is the same call
in the Responses API (:mod:`marft_envs.wire.responses`), returning the ``openai`` package's
``Response`` (so it needs ``openai``); ``client.aio.responses.create`` awaits it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from marft_envs.wire.checks import check_request, check_request_size
from marft_envs.wire.protocol import (
    ChatCompletion,
    Choice,
    Message,
    Reply,
    RequestLimits,
    RequestRefused,
    UnknownAgentError,
    Usage,
    completion,
)
from marft_envs.wire.responses import response_object, responses_request

# The wire types are re-exported: they were defined here before marft_envs.wire held them.
__all__ = [
    "CallRecord",
    "ChatCompletion",
    "Choice",
    "Counts",
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


class EpisodeEnded(RuntimeError):
    """A call arrived after the env ended the episode (timeout, call budget, or ``close()``)."""


@dataclass
class CallRecord:
    """One model call of a program, as the env received it."""

    agent: str
    messages: list[dict[str, Any]]
    index: int  # call number in the episode, from 0
    tools: list[dict[str, Any]] | None = None


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


class _Responses:
    def __init__(self, client: ProgramClient) -> None:
        self._client = client

    def create(self, **body: Any) -> Any:
        """One model call in the Responses API: the agent named by ``model`` answers ``input``."""
        return self._client._respond(body)


class _AsyncResponses:
    def __init__(self, client: ProgramClient) -> None:
        self._client = client

    async def create(self, **body: Any) -> Any:
        import asyncio

        return await asyncio.to_thread(self._client._respond, body)


class _AsyncClient:
    """``client.aio``: the ``AsyncOpenAI`` surface (``await aio.chat.completions.create(...)``,
    ``await aio.responses.create(...)``)."""

    def __init__(self, completions: _Completions, client: ProgramClient) -> None:
        self.chat = _Chat(_AsyncCompletions(completions))
        self.responses = _AsyncResponses(client)


class ProgramClient:
    """The client a program receives for one episode.

    Attributes:
        chat: ``chat.completions.create(model=AGENT, messages=...)``, as ``openai.OpenAI`` has it.
        responses: ``responses.create(model=AGENT, input=...)``, the Responses API.
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
        self.responses = _Responses(self)
        self.aio = _AsyncClient(completions, self)

    def _call(self, model: Any, messages: Any, fields: Mapping[str, Any]) -> ChatCompletion:
        return completion(model, self._reply(model, messages, fields))

    def _respond(self, body: Mapping[str, Any]) -> Any:
        call = responses_request(body)
        if call.stream:
            raise ValueError(
                "stream=True is not supported in process: each reply is returned whole. Call "
                "without stream, or register the program with transport='http', whose endpoint "
                "streams."
            )
        data = response_object(
            str(call.model), self._reply(call.model, call.messages, call.fields), call.echo
        )
        try:
            from openai.types.responses import Response
        except ImportError:
            raise ImportError(
                "client.responses returns the openai package's Response: pip install 'marft[agents]'."
            ) from None
        return Response.model_validate(data)

    def _reply(self, model: Any, messages: Any, fields: Mapping[str, Any]) -> Reply:
        try:
            plain, tools = check_request(self.agents, model, messages, fields, self._limits)
            check_request_size(plain, tools, self._limits)
        except RequestRefused as err:
            if err.kind is not None and self._refused is not None:
                self._refused(err.kind, str(err))
            raise
        reply = self._send(CallRecord(model, plain, next(self._calls), tools))
        self.counts.add(model, reply.prompt_tokens, reply.completion_tokens)
        return reply


def loopback_http_client() -> Any:
    """The HTTP connection pool of an ``openai`` client on the local endpoint: no timeout (the
    env bounds episodes), and no TLS context, whose CA bundle costs about 40 ms to load and which
    a ``http://127.0.0.1`` URL never uses."""
    import openai

    return openai.DefaultHttpxClient(timeout=None, verify=False)
