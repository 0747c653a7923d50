"""The OpenAI-compatible app that serves a trained team: each ``model`` is an agent.

Routes (Starlette):

- ``POST /v1/chat/completions``: one call of the agent named by ``model``, rendered and decoded as
  in the run's held-out evaluation (greedy, the agent's ``max_new_tokens``); with ``tools``, the
  reply is parsed into ``tool_calls`` by the env's parser. An unknown ``model`` is 404
  (``model_not_found``) naming the agents; a request marft cannot serve is 400 with what to do.
- ``POST /v1/responses``: the same call in the Responses API (what the OpenAI Agents SDK sends by
  default), translated by :mod:`marft_envs.wire.responses`.
- ``GET /v1/models`` and ``GET /v1/models/<agent>``: the agents.
- ``GET /health``: ``{"status": "ok"}`` (no key needed; for load balancers).

``stream=true`` on either call sends the reply, generated whole, as server-sent events
(:mod:`marft_envs.wire.streaming`). Every other route or method is a JSON error in the OpenAI error
shape (:mod:`marft_envs.wire.routes`).

Sampling fields: ``temperature`` > 0 samples at that temperature (with ``top_p`` and ``seed``),
otherwise decoding is greedy; ``max_tokens`` / ``max_completion_tokens`` lower the agent's budget
(never raise it). ``stop``, penalties and the other fields ``openai`` sends are accepted and
ignored, as on the training endpoint.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from marft_algos.protocols import GenerationSettings
from marft_algos.runs.tracing import EpisodeTracer, NoTracer
from marft_algos.serving.batcher import Batcher, BatcherClosed
from marft_algos.serving.call_traces import trace_call
from marft_algos.serving.disconnect import ClientGone, until_answered
from marft_algos.serving.guards import check_api_key, check_host, read_body, refused
from marft_algos.serving.team import ServedTeam
from marft_envs.wire.checks import check_request, finite_number
from marft_envs.wire.http import error_response as error
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

__all__ = ["build_app", "request_settings"]

logger = logging.getLogger(__name__)


def request_settings(
    team_settings: GenerationSettings, agent: str, fields: Mapping[str, Any]
) -> GenerationSettings:
    """The settings of one call: the team's (greedy) unless ``temperature`` > 0 asks to sample;
    ``max_tokens`` (or ``max_completion_tokens``) may lower the agent's budget.

    Raises:
        ValueError: A sampling field out of range, with what is accepted.
    """
    settings = team_settings
    temperature = fields.get("temperature")
    if temperature is not None:
        if not finite_number(temperature) or not 0 <= temperature <= 2:
            raise ValueError(f"temperature must be a number in [0, 2], got {temperature!r}.")
        if temperature > 0:
            top_p = fields.get("top_p")
            top_p = 1.0 if top_p is None else top_p
            if not finite_number(top_p) or not 0 < top_p <= 1:
                raise ValueError(f"top_p must be a number in (0, 1], got {top_p!r}.")
            settings = dataclasses.replace(
                settings, do_sample=True, temperature=float(temperature), top_p=float(top_p)
            )
            seed = fields.get("seed")
            if seed is not None:
                if not isinstance(seed, int) or isinstance(seed, bool):
                    raise ValueError(f"seed must be an integer, got {seed!r}.")
                settings = dataclasses.replace(settings, seed=seed)
    for name in ("max_completion_tokens", "max_tokens"):
        cap = fields.get(name)
        if cap is None:
            continue
        if not isinstance(cap, int) or isinstance(cap, bool) or cap < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {cap!r}.")
        budget = min(cap, settings.tokens_for(agent))
        settings = dataclasses.replace(
            settings,
            max_new_tokens_per_agent={**(settings.max_new_tokens_per_agent or {}), agent: budget},
        )
        break
    return settings


def build_app(
    team: ServedTeam,
    batcher: Batcher,
    *,
    api_key: str | None = None,
    limits: RequestLimits | None = None,
    loopback: bool = True,
    tracer: EpisodeTracer | NoTracer | None = None,
) -> Any:
    """The Starlette app serving ``team``; generation goes through ``batcher``.

    Args:
        team: The loaded team.
        batcher: Generates prompt ids (``policy.generate_from_ids``) a batch at a time.
        api_key: Required as ``Authorization: Bearer <key>`` on every ``/v1`` route (None: open).
        limits: Request bounds (default :class:`~marft_envs.wire.RequestLimits`, the training
            endpoint's; ``max_concurrent_calls`` is not used: calls queue in ``batcher``).
        loopback: The server is bound to a loopback address: answer only loopback ``Host`` names.
        tracer: Records every call as a span (:mod:`marft_algos.serving.call_traces`); None: none.
    """
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    limits = limits or RequestLimits()
    # A fast tokenizer refuses two encodes at once ("Already borrowed"): render one at a time.
    render_lock = threading.Lock()

    def render(agent: str, observation: Any, settings: GenerationSettings) -> Any:
        ids = team.prompt_ids(agent, observation, settings)  # counted against its bound first
        if ids is not None:
            return ids
        with render_lock:
            return team.policy.render(agent, observation)

    calls = itertools.count()
    agents = team.agents

    def guard(request: Any) -> Any:
        return check_host(request, loopback) or check_api_key(request, api_key)

    async def models(request: Any) -> Any:
        refusal = guard(request)
        if refusal is not None:
            return refusal
        return JSONResponse(model_list(agents))

    async def model(request: Any) -> Any:
        refusal = guard(request)
        if refusal is not None:
            return refusal
        name = request.path_params["model"]
        if name not in agents:
            message = f"model {name!r} is not an agent of this team; the agents are {list(agents)}."
            return error(404, message, "invalid_request_error", "model_not_found")
        return JSONResponse(model_card(name))

    async def health(request: Any) -> Any:
        return JSONResponse({"status": "ok" if batcher.running else "stopping"})

    async def answer(model: Any, messages: Any, fields: dict[str, Any], request: Any) -> Any:
        """The :class:`Reply` of one call of the agent ``model``, or the response refusing it
        (a call whose client disconnects is dropped from the queue)."""
        try:
            plain, tools = check_request(agents, model, messages, fields, limits)
            agent = str(model)
            settings = request_settings(team.settings, agent, fields)
            observation = team.observation(plain, tools)
            prompt = await asyncio.to_thread(render, agent, observation, settings)
        except UnknownAgentError as err:
            return error(404, str(err), "invalid_request_error", "model_not_found")
        except RequestRefused as err:
            return refused(err, limits)
        except (TypeError, ValueError) as err:  # ToolTemplateError is a ValueError
            return error(400, str(err), "invalid_request_error")
        key = object() if settings.seed is not None else None  # a seeded call samples alone
        try:
            generation = await until_answered(request, batcher.submit(agent, prompt, settings, key))
        except ClientGone:
            return error(499, "the client disconnected before the reply", "invalid_request_error")
        except BatcherClosed as err:
            return error(503, str(err), "server_error")
        except Exception as err:
            logger.exception("call of %r failed", agent)
            return error(500, f"generation failed: {type(err).__name__}: {err}", "server_error")
        return team.reply(generation, bool(tools), next(calls))

    traced = tracer if tracer is not None else NoTracer()

    async def traced_answer(
        model: Any, messages: Any, fields: dict[str, Any], request: Any, body: Mapping[str, Any]
    ) -> Any:
        """:func:`answer`, recorded as a span when tracing is on."""
        started = time.time_ns()
        outcome = await answer(model, messages, fields, request)
        if traced.enabled:
            times = (started, time.time_ns())
            trace_call(traced, str(model), messages, request.headers, body, outcome, times)
        return outcome

    async def call_body(request: Any) -> tuple[Any, Any]:
        """The body of a call the guards let through: ``(body, None)`` or ``(None, refusal)``."""
        refusal = guard(request)
        if refusal is not None:
            return None, refusal
        return await read_body(request, limits)

    async def chat(request: Any) -> Any:
        body, refusal = await call_body(request)
        if refusal is not None:
            return refusal
        stream, options = bool(body.get("stream")), body.get("stream_options") or {}
        skipped = ("model", "messages", "stream", "stream_options")
        fields = {k: v for k, v in body.items() if k not in skipped}
        reply = await traced_answer(body.get("model"), body.get("messages"), fields, request, body)
        if not isinstance(reply, Reply):
            return reply
        data = without_none(dataclasses.asdict(completion(str(body["model"]), reply)))
        if stream:
            usage = isinstance(options, dict) and bool(options.get("include_usage"))
            return streaming_response(chat_events(data, usage))
        return JSONResponse(data)

    async def responses(request: Any) -> Any:
        body, refusal = await call_body(request)
        if refusal is not None:
            return refusal
        try:
            call = responses_request(body)
        except (TypeError, ValueError) as err:
            return error(400, str(err), "invalid_request_error")
        reply = await traced_answer(call.model, call.messages, call.fields, request, body)
        if not isinstance(reply, Reply):
            return reply
        data = response_object(str(call.model), reply, call.echo)
        return streaming_response(response_events(data)) if call.stream else JSONResponse(data)

    return Starlette(
        routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/v1/responses", responses, methods=["POST"]),
            Route("/v1/models", models, methods=["GET"]),
            Route("/v1/models/{model:path}", model, methods=["GET"]),
            Route("/health", health, methods=["GET"]),
        ],
        exception_handlers=route_errors(),
    )
