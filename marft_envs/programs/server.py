"""An OpenAI-compatible endpoint for agent programs that run out of process or through a framework.

With ``transport="http"`` each episode of a :class:`~marft_envs.programs.ProgramEnv` gets its own
base URL on one local server, ``http://127.0.0.1:<port>/episodes/<id>/v1``, so concurrent episodes
never mix. The program receives a real ``openai.OpenAI(base_url=<that URL>)``; a framework builds
its own client from ``client.base_url`` (LangGraph's ``ChatOpenAI(base_url=...)``, the Agents SDK's
``AsyncOpenAI``). Served:

- ``POST /episodes/<id>/v1/chat/completions``: one model call; ``model`` names the agent (404 naming
  the agents for any other). It waits while the env schedules the agent and the policy generates.
- ``GET /episodes/<id>/v1/models``: the team's agents.

The server (Starlette on uvicorn, the ``agents`` extra) binds 127.0.0.1 only. It starts with the
first episode that needs it and stops when the last env using it closes, or when the process exits.
"""

from __future__ import annotations

import atexit
import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from marft_envs.programs.client import (
    CallRecord,
    Counts,
    EpisodeEnded,
    Reply,
    UnknownAgentError,
    check_request,
    completion,
)

__all__ = ["EpisodeServer", "release_server", "running_server", "shared_server"]


class _Episode:
    def __init__(self, agents: tuple[str, ...], send: Callable[[CallRecord], Reply]) -> None:
        self.agents = agents
        self.send = send
        self.counts = Counts()
        self.calls = itertools.count()


def _error(status: int, message: str, kind: str, code: str | None = None) -> Any:
    from starlette.responses import JSONResponse

    return JSONResponse(
        {"error": {"message": message, "type": kind, "code": code, "param": None}},
        status_code=status,
    )


def _without_none(value: Any) -> Any:
    """The response as the OpenAI API writes it: ``tool_calls`` absent rather than null."""
    if isinstance(value, dict):
        return {k: _without_none(v) for k, v in value.items() if v is not None or k == "content"}
    if isinstance(value, list):
        return [_without_none(v) for v in value]
    return value


class EpisodeServer:
    """One local server, many episodes (each under its own URL prefix)."""

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
        self._ids = itertools.count()
        self._lock = threading.Lock()
        app = Starlette(
            routes=[
                Route("/episodes/{episode}/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/episodes/{episode}/v1/models", self._models, methods=["GET"]),
            ]
        )
        config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
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
        self, agents: tuple[str, ...], send: Callable[[CallRecord], Reply]
    ) -> tuple[str, Counts]:
        """A new episode's base URL and its usage counts."""
        episode = _Episode(agents, send)
        with self._lock:
            key = f"e{next(self._ids)}"
            self._episodes[key] = episode
        return f"http://127.0.0.1:{self.port}/episodes/{key}/v1", episode.counts

    def release(self, base_url: str) -> None:
        """Forget an episode: later calls to its URL get 404."""
        key = base_url.rstrip("/").split("/")[-2]
        with self._lock:
            self._episodes.pop(key, None)

    def stop(self) -> None:
        """Close the socket and end the server thread."""
        self._server.should_exit = True
        self._thread.join(timeout=10)

    # ------------------------------------------------------------------ routes
    def _find(self, request: Any) -> _Episode | None:
        with self._lock:
            return self._episodes.get(request.path_params["episode"])

    async def _models(self, request: Any) -> Any:
        from starlette.responses import JSONResponse

        episode = self._find(request)
        if episode is None:
            return _error(404, "unknown or finished episode", "invalid_request_error")
        data = [
            {"id": a, "object": "model", "created": 0, "owned_by": "marft"} for a in episode.agents
        ]
        return JSONResponse({"object": "list", "data": data})

    async def _chat(self, request: Any) -> Any:
        import anyio
        from starlette.responses import JSONResponse

        episode = self._find(request)
        if episode is None:
            return _error(404, "unknown or finished episode", "invalid_request_error")
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "the request body is not JSON", "invalid_request_error")
        if not isinstance(body, dict):
            return _error(400, "the request body must be a JSON object", "invalid_request_error")
        fields = {k: v for k, v in body.items() if k not in ("model", "messages")}
        try:
            messages, tools = check_request(
                episode.agents, body.get("model"), body.get("messages"), fields
            )
        except UnknownAgentError as err:
            return _error(404, str(err), "invalid_request_error", "model_not_found")
        except (TypeError, ValueError) as err:
            return _error(400, str(err), "invalid_request_error")
        agent = str(body["model"])
        call = CallRecord(agent, messages, next(episode.calls), tools)
        try:
            reply = await anyio.to_thread.run_sync(episode.send, call, abandon_on_cancel=True)
        except EpisodeEnded as err:
            return _error(409, str(err), "invalid_request_error", "episode_ended")
        episode.counts.add(agent, reply.prompt_tokens, reply.completion_tokens)
        return JSONResponse(_without_none(asdict(completion(agent, reply))))


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
