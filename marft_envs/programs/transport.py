"""How a program reaches the policy, and how its calls are shown to it.

Where the program runs (``isolation``): a thread of this process, or a child process of its own
(:mod:`marft_envs.programs.runner`, :mod:`marft_envs.programs.isolation`). What it calls
(``transport``): ``"inprocess"``, a :class:`~marft_envs.programs.ProgramClient` handing each call
to the env directly; ``"http"``, ``openai.OpenAI`` on the episode's own URL of the process's
shared local endpoint (:mod:`marft_envs.programs.server`). Either way a call reaches the policy
as its messages, written as text first under ``tool_prompt``
(:func:`~marft_envs.wire.tools.policy_messages`), and the generated text goes back as the call's
:class:`~marft_envs.wire.Reply`, parsed into tool calls when the call offered tools.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np

from marft_envs.programs.client import CallRecord, ProgramClient, loopback_http_client
from marft_envs.programs.runner import ProgramRun
from marft_envs.programs.settings import ProgramSettings
from marft_envs.wire.prompts import PromptBudget
from marft_envs.wire.protocol import Reply, RequestRefused
from marft_envs.wire.tools import parse_tool_calls, policy_messages

__all__ = ["Transport"]

logger = logging.getLogger(__name__)

#: How to get a prompt under its bound, for a program's author.
_PROMPT_FIX = (
    "send fewer or shorter messages, or lower the agent's max_new_tokens (or max_prompt_tokens "
    "where the program is registered)"
)


class Transport:
    """The transport of one env copy: it starts each episode's program with its client, and
    holds the endpoint and the HTTP connection pool across episodes (``transport="http"``).

    Args:
        settings: The env's settings (``transport``, ``isolation``, ``limits``, tool handling,
            ``episode_timeout``).
        agents: The team's agents (the valid ``model`` names).
    """

    def __init__(self, settings: ProgramSettings, agents: tuple[str, ...]) -> None:
        self.settings = settings
        self.agents = agents
        self.server: Any = None
        self.episode_url: str | None = None
        #: Bounds each call's rendered prompt before it is queued (None: no check; the collector
        #: sets it from its policy, :meth:`~marft_envs.programs.ProgramEnv.limit_prompts`).
        self.prompt_budget: PromptBudget | None = None
        self._http: Any = None

    def start(self, program: Callable[..., Any], task: Any, rng: np.random.Generator) -> ProgramRun:
        """Run ``program(task, client)`` for one episode; ``rng`` becomes ``client.rng``."""
        settings = self.settings
        make_client: Callable[[ProgramRun], Any]
        if settings.transport == "http":
            make_client = lambda run: self._http_client(run, rng)  # noqa: E731
        else:
            make_client = lambda run: ProgramClient(  # noqa: E731
                self.agents, run.send, rng, settings.limits, run.refused
            )
        return ProgramRun(
            program,
            task,
            make_client,
            settings.episode_timeout,
            isolation=settings.isolation,
            max_pending=settings.limits.max_concurrent_calls,
            check=self.check_prompt,
        )

    def check_prompt(self, call: CallRecord) -> None:
        """Refuse a call whose rendered prompt passes its bound (``max_prompt_tokens``, and the
        context length less the agent's reply budget), before the policy sees it.

        Raises:
            RequestRefused: 400 ``context_length_exceeded``, counted as ``PromptTooLong``.
        """
        budget = self.prompt_budget
        if budget is None:
            return
        tools = self.tools(call)
        messages = self.messages(call)
        observation: Any = {"messages": messages, "tools": tools} if tools else messages
        try:
            budget.check(call.agent, observation, self.settings.max_prompt_tokens, _PROMPT_FIX)
        except RequestRefused:
            raise
        except Exception as err:  # a prompt the policy cannot render fails where it renders
            logger.debug("the prompt of call %d was not counted: %s", call.index, err)

    def messages(self, call: CallRecord) -> list[dict[str, Any]]:
        """The call's messages as the policy renders them (tools written as text under
        ``tool_prompt``; otherwise tool-call arguments as objects, as chat templates take them)."""
        return policy_messages(call.messages, call.tools, self.settings.tool_prompt)

    def tools(self, call: CallRecord) -> list[dict[str, Any]] | None:
        """The tools the call offers the chat template (None under ``tool_prompt``, which wrote
        them into the messages)."""
        if not call.tools or self.settings.tool_prompt is not None:
            return None
        return [dict(t) for t in call.tools]

    def reply(self, text: str, usage: tuple[int, int, bool], call: CallRecord | None) -> Reply:
        """The reply to ``call``: the generated text with its ``(prompt tokens, completion
        tokens, finished)``, parsed into content and tool calls when the call offered tools."""
        prompt_tokens, completion_tokens, finished = usage
        reply = Reply(text, finished, prompt_tokens, completion_tokens)
        if call is not None and call.tools:
            reply.content, reply.tool_calls = parse_tool_calls(
                text, self.settings.parser, call.index
            )
        return reply

    def end_episode(self) -> None:
        """Forget the episode's URL (later calls to it get 409)."""
        if self.server is not None and self.episode_url is not None:
            self.server.release(self.episode_url)
            self.episode_url = None

    def close(self) -> None:
        """Close the connection pool; the last env using the endpoint stops it."""
        if self._http is not None:
            self._http.close()
            self._http = None
        if self.server is not None:
            from marft_envs.programs.server import release_server

            self.server = None
            release_server()

    def _http_client(self, run: ProgramRun, rng: np.random.Generator) -> Any:
        """``openai.OpenAI`` on a fresh episode URL of the shared local endpoint."""
        from marft_envs.programs.server import shared_server

        try:
            import openai
        except ImportError:
            raise ImportError(
                "transport='http' needs the openai package: pip install 'marft[agents]'."
            ) from None
        if self.server is None:
            self.server = shared_server()
        url, counts = self.server.open(self.agents, run, self.settings.limits)
        self.episode_url = url
        if self._http is None:  # one connection pool per env copy, kept across its episodes
            self._http = loopback_http_client()
        key = url.rstrip("/").split("/")[-2]  # the episode's secret, also sent as its API key
        client = openai.OpenAI(
            base_url=url, api_key=key, max_retries=0, timeout=None, http_client=self._http
        )
        client.rng, client.counts, client.agents = rng, counts, self.agents  # type: ignore[attr-defined]
        return client
