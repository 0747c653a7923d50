"""An agent program as a Flex-POMDP: the program's control flow is the dependency function.

==================  ===========================================================================
Agents              the ``agents`` given at registration (the ``model`` names the program uses)
Observation         exactly the messages the program sent for the pending call (system prompt
                    included), and its ``tools`` if it offered any; the policy renders them with
                    its chat template (``tool_prompt``: the tools described in text instead)
Action              the agent's reply, handed back to the program as the call's response (parsed
                    into ``tool_calls`` by ``tool_parser`` when the call offered tools)
Round               one model call: the agent the call names acts once
Reward              what the program returns when it ends (a float, or named parts combined by
                    ``reward_weights``), paid under ``credit`` (default ``"team"``: every agent
                    that acted); 0 in the rounds before
Termination         the program returned, raised, or ran out of its time budget
Truncation          ``max_calls`` calls without an end
Version history     programs are versioned by the id they are registered under
==================  ===========================================================================

Each call is one AEC step of the agent named by ``model``. Between steps the program runs, in
its own thread, until its next call or its end; its clock runs from the episode's start, whatever
the env is doing, except while a call waits for the model, and past ``episode_timeout`` seconds
the episode fails. A program that raises, or returns a reward
that is not a finite number (or a mapping of them), ends its episode with ``error_reward`` and the
error in ``info["program_error"]``; the run goes on. The task comes from the env's seeded rng and
the program's own randomness from ``client.rng``, so a seeded episode repeats.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple, cast

import numpy as np
from gymnasium.utils import seeding

from marft_envs.core.dependency import DependencyFunction, RoundState, Turn
from marft_envs.core.env import FlexPOMDPEnv, Transition
from marft_envs.core.profiles import AgentProfile
from marft_envs.core.spaces import ChatObservation, ChatSpace
from marft_envs.programs.client import CallRecord
from marft_envs.programs.failures import FailureRule
from marft_envs.programs.runner import Event, ProgramRun
from marft_envs.programs.settings import ProgramSettings
from marft_envs.programs.tasks import Tasks, TaskSource, split_tasks
from marft_envs.programs.transport import Transport
from marft_envs.wire.prompts import PromptBudget

__all__ = ["ProgramEnv", "ProgramTurns", "split_tasks"]

logger = logging.getLogger(__name__)


class _Prepared(NamedTuple):
    """A program started ahead of its reset (:meth:`ProgramEnv.prepare_reset`)."""

    seed: int
    options: dict[str, Any]
    rng: np.random.Generator
    task: Any
    run: ProgramRun
    started: float


class ProgramTurns(DependencyFunction):
    """The program decides: each round, the agent its pending call names acts, seeing its messages."""

    def next_turn(self, state: RoundState) -> Turn | None:
        if state.actions:
            return None  # one call per round
        return Turn(agent=str(state.context["agent"]))


class ProgramEnv(FlexPOMDPEnv):
    """A team written as a program, as a PettingZoo AEC env (see the module notes).

    Args:
        program: ``program(task, client)`` (a function or ``async def``) that runs one episode with
            ``client.chat.completions.create(model=AGENT, messages=...)`` and returns its reward.
        agents: The agents, as names or :class:`~marft_envs.AgentProfile` (``graded`` matters for
            ``credit="graded"``; system prompts come from the program's own messages).
        tasks: A list of tasks, or a function of a ``numpy`` generator that draws one.
        test_tasks: Held-out tasks for evaluation (a list or a function); default: a seeded
            ``test_size`` share of ``tasks`` when it is a list.
        split: ``"train"``, ``"test"`` or ``"all"``.
        render_mode: As for every :class:`~marft_envs.FlexPOMDPEnv`.
        **settings: The fields of :class:`~marft_envs.programs.ProgramSettings` by name
            (``max_calls=8``, ``on_error="reward"``, ``transport="http"``, ...); the request
            bounds also as ``max_request_bytes``, ``max_messages`` and ``max_concurrent_calls``.

    Attributes:
        settings: The checked :class:`~marft_envs.programs.ProgramSettings`.
        dataset: This split's tasks (None when they are drawn by a function).
        task: The task of the episode in progress.
    """

    metadata = {**FlexPOMDPEnv.metadata, "name": "program_v0"}
    program: Callable[..., Any]

    def __init__(
        self,
        program: Callable[..., Any],
        agents: Iterable[str | AgentProfile | Mapping[str, Any]],
        tasks: TaskSource,
        *,
        test_tasks: TaskSource | None = None,
        split: str = "train",
        render_mode: str | None = None,
        **settings: Any,
    ) -> None:
        if not callable(program):
            raise TypeError(
                f"program must be a function program(task, client), got {program!r:.80}."
            )
        self.settings = s = ProgramSettings.from_keywords(settings)
        profiles = [AgentProfile(role=a) if isinstance(a, str) else a for a in agents]
        super().__init__(
            profiles,
            ProgramTurns(),
            horizon=s.max_calls,
            credit=s.credit,
            credit_scope="episode",
            render_mode=render_mode,
        )
        self.observation_spaces = {
            a: ChatObservation(cast(ChatSpace, self.observation_spaces[a]["messages"]).max_length)
            for a in self.possible_agents
        }
        self.program = program
        self.split = split
        self.tasks = Tasks.of_split(
            tasks, test_tasks, split, test_size=s.test_size, seed=s.split_seed
        )
        self.dataset = self.tasks.dataset
        self.failures = FailureRule(s, family=program)
        self._transport = Transport(s, tuple(self.possible_agents))
        self._run: ProgramRun | None = None
        self._prepared: _Prepared | None = None
        self._reset_seed: int | None = None
        self._event: Event | None = None
        self._started = 0.0
        self.task: Any = None
        self._clear_calls()

    @property
    def max_error_share(self) -> float:
        """Share of one rollout's episodes that may fail (read by the collector)."""
        return self.settings.max_error_share

    @property
    def error_reward(self) -> float:
        """What a failed episode is paid."""
        return self.settings.error_reward

    # ------------------------------------------------------------------ task hooks
    def prepare_reset(self, seed: int | None, options: Mapping[str, Any] | None = None) -> None:
        """Start the program of the episode that ``reset(seed=seed, options=options)`` will
        begin, without waiting for it. Collectors call it on every env copy before resetting
        them one after another (each reset waits for its program's first call), so that the
        programs of all copies start, and run out of ``episode_timeout``, at once. A reset
        with other arguments discards it."""
        if seed is None:
            return
        self._discard_prepared()
        self._stop()
        rng, _ = seeding.np_random(seed)
        task, run = self._start_program(rng, options)
        self._prepared = _Prepared(seed, dict(options or {}), rng, task, run, time.monotonic())

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        self._reset_seed = seed
        super().reset(seed=seed, options=options)

    def _reset_task(self, options: Mapping[str, Any] | None) -> None:
        prepared, self._prepared = self._prepared, None
        self._clear_calls()
        if prepared is not None and (self._reset_seed, dict(options or {})) == prepared[:2]:
            self.np_random, self.task, self._run = prepared.rng, prepared.task, prepared.run
            self._started = prepared.started
        else:
            if prepared is not None:
                prepared.run.close()  # its URL, the transport's latest, is released by _stop
            self._stop()
            self._started = time.monotonic()
            self.task, self._run = self._start_program(self.np_random, options)
        self._event = self._run.next_event()

    def _start_program(
        self, rng: np.random.Generator, options: Mapping[str, Any] | None
    ) -> tuple[Any, ProgramRun]:
        """Draw the episode's task from ``rng`` and start its program."""
        task = self.tasks.pick(rng, options or {})
        program_rng = np.random.default_rng(int(rng.integers(2**63)))
        return task, self._transport.start(self.program, task, program_rng)

    def _clear_calls(self) -> None:
        """Forget the calls, the announced reply and the token usage of the last episode."""
        self._latest: dict[str, CallRecord] = {}
        self._answered: str | None = None
        self._usage: tuple[int, int, bool] = (0, 0, True)
        self._last_prompt_tokens = 0

    def _route_context(self) -> Mapping[str, Any]:
        call = self._event.call if self._event is not None else None
        return {"agent": call.agent if call is not None else None}

    def _observation(self, agent: str) -> str:  # pragma: no cover - rollout_messages is overridden
        return ""

    def observe(self, agent: str) -> dict[str, Any]:
        """``{"messages": ...}`` as for every env, plus ``"tools"`` when the call offered tools
        (and ``tool_prompt`` is not set)."""
        observation: dict[str, Any] = {"messages": self.rollout_messages(agent)}
        call = self._latest.get(agent)
        tools = self._transport.tools(call) if call is not None else None
        if tools is not None:
            observation["tools"] = tools
        return observation

    def rollout_messages(self, agent: str) -> list[dict[str, Any]]:
        """Exactly the messages the program sent for the agent's pending call; for an agent that
        is not called now, those of its latest call this episode ([] before its first). With
        ``tool_prompt``, tools, tool calls and tool results are written as text; otherwise tool
        calls keep their fields, arguments as objects (as chat templates take them)."""
        if agent not in self.profiles:
            raise KeyError(f"Unknown agent {agent!r}; the team is {self.possible_agents}.")
        call = self._pending_call()
        if call is not None and call.agent == agent:
            self._latest[agent] = call
        latest = self._latest.get(agent)
        return [] if latest is None else self._transport.messages(latest)

    def limit_prompts(self, budget: PromptBudget | None) -> None:
        """Check each call's rendered prompt against ``budget`` before it is queued (collectors
        pass their policy's): a prompt past ``max_prompt_tokens`` or the context length less the
        agent's reply budget is refused (HTTP 400) and fails the episode as ``PromptTooLong``."""
        self._transport.prompt_budget = budget

    def note_generation(self, prompt_tokens: int, completion_tokens: int, finished: bool) -> None:
        self._usage = (int(prompt_tokens), int(completion_tokens), bool(finished))
        self._last_prompt_tokens = int(prompt_tokens)

    def prepare_step(self, action: str) -> None:
        """Hand the reply to the program now, so that the programs of all env copies run on to
        their next calls at once (the collector steps the copies one after another)."""
        if self._run is not None and self._pending_call() is not None and self._answered is None:
            self._answer(action)

    def _answer(self, text: str) -> None:
        assert self._run is not None
        usage, self._usage = self._usage, (0, 0, True)
        self._answered = text
        self._run.answer(self._transport.reply(text, usage, self._pending_call()))

    def _transition(self, actions: Mapping[str, str]) -> Transition:
        assert self._run is not None
        ((_, text),) = actions.items()
        if self._answered is None:
            self._answer(text)
        elif self._answered != text:
            raise RuntimeError(
                "step() got another action than prepare_step() announced for this call; the program "
                "already received the announced one. Step the action you prepared."
            )
        self._answered = None
        self._event = self._run.next_event()
        broken = self.failures.broken_bound(
            self._run.refusals, self._last_prompt_tokens, time.monotonic() - self._started
        )
        if broken is not None:
            self._stop()
            return self.failures.failed(*broken, "", self._counts(), self._last_call())
        if self._event.kind == "call":
            if self.timestep + 1 >= self.horizon:
                self._stop()
                return self.failures.truncated(self._counts())
            return Transition(reward=0.0)
        return self._final(self._event)

    # ------------------------------------------------------------------ episode end
    def _start_round(self) -> None:
        if self._event is not None and self._event.kind != "call" and not self.history:
            self._end_without_calls(self._final(self._event))
            return
        super()._start_round()

    def _end_without_calls(self, result: Transition) -> None:
        """A program that ended before its first call: the episode is over at reset, with no
        decision to train on."""
        logger.warning(
            "The program ended its episode without a model call (%s); it gives no decisions to "
            "train on.",
            result.info.get("program_error", {}).get("type", "returned")
            if result.info
            else "returned",
        )
        for agent in self.agents:
            self.terminations[agent] = True
            self.infos[agent] = {**result.info, "team_reward": 0.0, "no_calls": True}
        self._round_result = dict(self.infos[self.agents[0]])
        self.agent_selection = self.agents[0]

    def _final(self, event: Event) -> Transition:
        self._stop()
        assert self._run is not None
        counts, call = self._counts(), self._last_call()
        if self._run.refusals:  # a refused request fails the episode, whatever the program did then
            return self.failures.failed(*self._run.refusals[0], "", counts, call)
        if event.kind == "return":
            return self.failures.finished(event.value, counts, call)
        if event.kind == "timeout":
            return self.failures.timed_out(counts, call)
        assert event.error is not None
        return self.failures.failed(
            type(event.error).__name__, str(event.error), event.traceback, counts, call
        )

    def _counts(self) -> dict[str, Any]:
        if self._run is None:
            return {}
        counts = self._run.client.counts
        return {
            "calls": dict(counts.calls),
            "prompt_tokens": dict(counts.prompt_tokens),
            "completion_tokens": dict(counts.completion_tokens),
        }

    def _pending_call(self) -> CallRecord | None:
        return self._event.call if self._event is not None and self._event.kind == "call" else None

    def _last_call(self) -> CallRecord | None:
        if self._event is not None and self._event.call is not None:
            return self._event.call
        return self._run.last_call if self._run is not None else None

    def _discard_prepared(self) -> None:
        if self._prepared is not None:
            self._prepared.run.close()
            self._prepared = None

    def _stop(self) -> None:
        if self._run is not None:
            self._run.close()
        self._transport.end_episode()

    def close(self) -> None:
        """End the episode in progress; the last env using the endpoint stops it."""
        self._discard_prepared()
        self._stop()
        self._transport.close()
        super().close()
