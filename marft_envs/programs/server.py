"""An OpenAI-compatible endpoint for agent programs that run out of process or through a framework.

With ``transport="http"`` each episode of a :class:`~marft_envs.programs.ProgramEnv` gets its own
base URL on one local server, ``http://127.0.0.1:<port>/episodes/<secret>/v1``, so concurrent
episodes never mix. The program receives a real ``openai.OpenAI(base_url=<that URL>)``; a framework
builds its own client from ``client.base_url`` (LangGraph's ``ChatOpenAI(base_url=...)``, the
Agents SDK's ``AsyncOpenAI``). Served:

- ``POST /episodes/<secret>/v1/chat/completions``: one model call; ``model`` names the agent (404
  naming the agents for any other). It waits while the env schedules the agent and the policy
  generates, holding no thread: any number of episodes may wait at once.
- ``POST /episodes/<secret>/v1/responses``: the same call in the Responses API (what the OpenAI
  Agents SDK sends by default), translated by :mod:`marft_envs.wire.responses`.
- ``GET /episodes/<secret>/v1/models`` (and ``/models/<agent>``): the team's agents.

``stream=true`` is served on both calls: the reply is generated whole (the ids trained on are the
ids sampled), then sent as server-sent events (:mod:`marft_envs.wire.streaming`). Any other route
is a JSON error in the OpenAI error shape.

Who may call (docs/programs.md, "Threat model"): the server binds 127.0.0.1 only; an episode's URL
holds an unguessable secret (``secrets.token_urlsafe(32)``), known only to the program it was
handed to; requests must name ``Host: 127.0.0.1`` or ``localhost`` and send JSON, which a web page
cannot do without the browser asking the server first. Bounds (:class:`~marft_envs.wire.RequestLimits`): request
bytes, messages per request and calls waiting at once per episode; a request past one is refused
(413, 400, 429) and counted as its episode's program error.

The server (Starlette on uvicorn, the ``agents`` extra) starts with the first episode that needs it
and stops when the last env using it closes, or when the process exits.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import itertools
import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import asdict
from typing import Any

from marft_envs.programs.client import CallRecord, Counts, EpisodeEnded
from marft_envs.programs.runner import ProgramRun
from marft_envs.wire.checks import check_request
from marft_envs.wire.http import allowed_host, error_response, read_json
from marft_envs.wire.protocol import (
    Reply,
    RequestLimits,
    RequestRefused,
    UnknownAgentError,
    completion,
    without_none,
)
from marft_envs.wire.responses import response_object, responses_request
from marft_envs.wire.routes import model_card, model_list, route_errors
from marft_envs.wire.streaming import chat_events, response_events, streaming_response

# The HTTP checks are re-exported: they were defined here before marft_envs.wire.http held them.
__all__ = [
    "EpisodeServer",
    "allowed_host",
    "error_response",
    "read_json",
    "release_server",
    "running_server",
    "shared_server",
    "without_none",
]

#: How many ended episodes' secrets are remembered, so that a late call gets 409, not 404.
_ENDED_KEPT = 4096


class _Episode:
    def __init__(self, agents: tuple[str, ...], run: ProgramRun, limits: RequestLimits) -> None:
        self.agents = agents
        self.run = run
        self.limits = limits
        self.counts = Counts()
        self.calls = itertools.count()


class EpisodeServer:
    """One local server, many episodes (each under its own secret URL prefix)."""

    def __init__(self) -> None:
        try:
            import uvicorn
            from starlette.applications import Starlette
            from starlette.routing import Route
        except ImportError as err:
            raise ImportError(
                f"transport='http' needs the server packages ({err.name} is missing): "
                f"pip install 'marft[agents]'."
            ) from None
        self._episodes: dict[str, _Episode] = {}
        self._ended: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()
        app = Starlette(
            routes=[
                Route("/episodes/{episode}/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/episodes/{episode}/v1/responses", self._responses, methods=["POST"]),
                Route("/episodes/{episode}/v1/models", self._models, methods=["GET"]),
                Route("/episodes/{episode}/v1/models/{model:path}", self._model, methods=["GET"]),
            ],
            exception_handlers=route_errors(),
        )
        config = uvicorn.Config(
            app, host="127.0.0.1", port=0, log_level="warning", lifespan="off", access_log=False
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="marft-endpoint", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the agent-program endpoint did not start on 127.0.0.1.")
            time.sleep(0.01)
        self.port = int(self._server.servers[0].sockets[0].getsockname()[1])

    # ------------------------------------------------------------------ episodes
    def open(
        self, agents: tuple[str, ...], run: ProgramRun, limits: RequestLimits
    ) -> tuple[str, Counts]:
        """A new episode's base URL (with its secret) and its usage counts."""
        episode = _Episode(agents, run, limits)
        key = secrets.token_urlsafe(32)
        with self._lock:
            self._episodes[key] = episode
        return f"http://127.0.0.1:{self.port}/episodes/{key}/v1", episode.counts

    def release(self, base_url: str) -> None:
        """Forget an episode: later calls to its URL get 409 (episode ended)."""
        key = base_url.rstrip("/").split("/")[-2]
        with self._lock:
            if self._episodes.pop(key, None) is not None:
                self._ended[key] = None
                while len(self._ended) > _ENDED_KEPT:
                    self._ended.popitem(last=False)

    def stop(self) -> None:
        """Close the socket and end the server thread."""
        self._server.should_exit = True
        self._thread.join(timeout=10)

    # ------------------------------------------------------------------ routes
    def _find(self, request: Any) -> tuple[_Episode | None, Any]:
        """The request's episode, or the response refusing it."""
        if not allowed_host(request.headers.get("host"), self.port):
            return None, error_response(
                403,
                f"Host {request.headers.get('host')!r} is not served; call "
                f"http://127.0.0.1:{self.port}/... (the episode's base URL).",
                "invalid_request_error",
                "forbidden_host",
            )
        key = request.path_params["episode"]
        with self._lock:
            episode = self._episodes.get(key)
            ended = key in self._ended
        if episode is not None:
            return episode, None
        if ended:
            return None, error_response(
                409,
                "this episode has ended (its program returned, failed, or ran out of its time or "
                "call budget); it takes no more calls.",
                "invalid_request_error",
                "episode_ended",
            )
        return None, error_response(404, "unknown episode", "invalid_request_error")

    async def _models(self, request: Any) -> Any:
        from starlette.responses import JSONResponse

        episode, refused = self._find(request)
        if episode is None:
            return refused
        return JSONResponse(model_list(episode.agents))

    async def _model(self, request: Any) -> Any:
        from starlette.responses import JSONResponse

        episode, refused = self._find(request)
        if episode is None:
            return refused
        name = request.path_params["model"]
        if name not in episode.agents:
            message = f"model {name!r} is not an agent of this team; the agents are {list(episode.agents)}."
            return error_response(404, message, "invalid_request_error", "model_not_found")
        return JSONResponse(model_card(name))

    async def _body(self, request: Any) -> tuple[_Episode | None, Any]:
        """The request's episode and JSON object body, or (None, the response refusing it)."""
        episode, refused = self._find(request)
        if episode is None:
            return None, refused
        try:
            body = await read_json(request, episode.limits.max_request_bytes)
            if not isinstance(body, dict):
                raise RequestRefused("the request body must be a JSON object.", status=400)
        except RequestRefused as err:
            if err.kind is not None:
                episode.run.refused(err.kind, str(err))
            return None, error_response(err.status, str(err), err.error_type, err.code)
        return episode, body

    async def _chat(self, request: Any) -> Any:
        from starlette.responses import JSONResponse

        episode, body = await self._body(request)
        if episode is None:
            return body
        options = body.get("stream_options") or {}
        skipped = ("model", "messages", "stream", "stream_options")
        fields = {k: v for k, v in body.items() if k not in skipped}
        reply = await self._answer(episode, body.get("model"), body.get("messages"), fields)
        if not isinstance(reply, Reply):
            return reply
        data = without_none(asdict(completion(str(body["model"]), reply)))
        if body.get("stream"):
            usage = isinstance(options, dict) and bool(options.get("include_usage"))
            return streaming_response(chat_events(data, usage))
        return JSONResponse(data)

    async def _responses(self, request: Any) -> Any:
        from starlette.responses import JSONResponse

        episode, body = await self._body(request)
        if episode is None:
            return body
        try:
            call = responses_request(body)
        except (TypeError, ValueError) as err:
            return error_response(400, str(err), "invalid_request_error")
        reply = await self._answer(episode, call.model, call.messages, call.fields)
        if not isinstance(reply, Reply):
            return reply
        data = response_object(str(call.model), reply, call.echo)
        return streaming_response(response_events(data)) if call.stream else JSONResponse(data)

    async def _answer(self, episode: _Episode, model: Any, messages: Any, fields: Any) -> Any:
        """The :class:`Reply` to one call of the agent ``model``, or the response refusing it."""
        try:
            messages, tools = check_request(episode.agents, model, messages, fields, episode.limits)
        except UnknownAgentError as err:
            return error_response(404, str(err), "invalid_request_error", "model_not_found")
        except RequestRefused as err:
            if err.kind is not None:
                episode.run.refused(err.kind, str(err))
            return error_response(err.status, str(err), err.error_type, err.code)
        except (TypeError, ValueError) as err:
            return error_response(400, str(err), "invalid_request_error")
        agent = str(model)
        call = CallRecord(agent, messages, next(episode.calls), tools)
        loop = asyncio.get_running_loop()
        reply: asyncio.Future[Any] = loop.create_future()

        def deliver(answer: Any) -> None:  # from the env's thread
            with contextlib.suppress(RuntimeError):  # the loop has stopped with the endpoint
                loop.call_soon_threadsafe(_settle, reply, answer)

        try:
            # Off the event loop: submit counts the call's prompt (bounded work, but not free).
            await asyncio.to_thread(episode.run.submit, call, deliver)
            answer = await reply
            if isinstance(answer, EpisodeEnded):
                raise answer
        except EpisodeEnded as err:
            return error_response(409, str(err), "invalid_request_error", "episode_ended")
        except RequestRefused as err:
            return error_response(err.status, str(err), err.error_type, err.code)
        episode.counts.add(agent, answer.prompt_tokens, answer.completion_tokens)
        return answer


def _settle(future: asyncio.Future[Any], answer: Any) -> None:
    if not future.done():
        future.set_result(answer)


class _Shared:
    """The process's one endpoint, counted out to the envs that serve programs over HTTP."""

    def __init__(self) -> None:
        self.server: EpisodeServer | None = None
        self.users = 0
        self.lock = threading.Lock()

    def acquire(self) -> EpisodeServer:
        with self.lock:
            if self.server is None:
                self.server = EpisodeServer()
            self.users += 1
            return self.server

    def release(self, *, all_users: bool = False) -> None:
        with self.lock:
            self.users = 0 if all_users else self.users - 1
            if self.users <= 0 and self.server is not None:
                self.server.stop()
                self.server = None


_SHARED = _Shared()
atexit.register(_SHARED.release, all_users=True)


def shared_server() -> EpisodeServer:
    """The process's endpoint, started on first use; every caller must :func:`release_server`."""
    return _SHARED.acquire()


def release_server() -> None:
    """One user fewer; the last one stops the server (no port of ours stays open)."""
    _SHARED.release()


def running_server() -> EpisodeServer | None:
    """The endpoint while one runs in this process (None otherwise)."""
    return _SHARED.server
