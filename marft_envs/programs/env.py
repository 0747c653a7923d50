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
its own thread, until its next call or its end; the env waits for it at most ``episode_timeout``
seconds in total per episode (model time not counted). A program that raises, or returns a reward
that is not a finite number (or a mapping of them), ends its episode with ``error_reward`` and the
error in ``info["program_error"]``; the run goes on. The task comes from the env's seeded rng and
the program's own randomness from ``client.rng``, so a seeded episode repeats.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, cast

import numpy as np

from marft_envs.core.data import held_out_rows
from marft_envs.core.dependency import DependencyFunction, RoundState, Turn
from marft_envs.core.env import FlexPOMDPEnv, Transition
from marft_envs.core.profiles import AgentProfile
from marft_envs.core.spaces import ChatObservation, ChatSpace
from marft_envs.programs.client import (
    CallRecord,
    ProgramClient,
    Reply,
    RequestLimits,
    loopback_http_client,
)
from marft_envs.programs.rewards import MAX_REWARD_PARTS, combine_reward, finite_number
from marft_envs.programs.runner import Event, ProgramRun
from marft_envs.programs.tools import (
    TOOL_PROMPTS,
    ToolParser,
    parse_tool_calls,
    resolve_parser,
    template_message,
)

__all__ = ["ProgramEnv", "ProgramTurns", "split_tasks"]

logger = logging.getLogger(__name__)

TaskSource = Sequence[Any] | Callable[[np.random.Generator], Any]


class ProgramTurns(DependencyFunction):
    """The program decides: each round, the agent its pending call names acts, seeing its messages."""

    def next_turn(self, state: RoundState) -> Turn | None:
        if state.actions:
            return None  # one call per round
        return Turn(agent=str(state.context["agent"]))


def split_tasks(
    tasks: Sequence[Any],
    test_tasks: Sequence[Any] | None,
    split: str,
    *,
    test_size: float,
    seed: int,
) -> list[Any]:
    """The tasks of one split: ``test_tasks`` as the test split, or a seeded held-out share of
    ``tasks`` (no task text on both sides) when none is given."""
    if split == "all":
        return list(tasks) + list(test_tasks or [])
    if test_tasks is not None:
        return list(tasks if split == "train" else test_tasks)
    held = held_out_rows([repr(t) for t in tasks], test_size, seed=seed)
    return [t for i, t in enumerate(tasks) if (i in held) == (split == "test")]


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
        reward_weights: Weight of each named reward part (default 1 each).
        credit: Credit rule for the program's reward (default ``"team"``: every agent that acted).
        max_calls: Model calls per episode before it is truncated.
        episode_timeout: Seconds the env waits, in total per episode, for the program between its
            calls (model time excluded); past it the episode fails (``Timeout``).
        max_episode_seconds: Wall-clock seconds of one episode, model time included, checked at
            each call; past it the episode fails (``Timeout``). None: no limit.
        on_error: What a failed episode (the program raised, timed out, returned no finite
            reward, passed a bound, or used up ``max_calls``) is worth to training. ``"drop"``
            (default): it is left out of the update and counted, so failing can never pay more
            than finishing. ``"reward"``: it is paid ``error_reward`` and trained on (a warning
            says when that exceeds the lowest reward a finished episode was paid).
        error_reward: What a failed episode is paid (under ``"drop"``: only what held-out
            metrics such as ``eval/reward_mean`` count it as).
        max_error_share: Share of one rollout's episodes that may fail before the run stops with
            the first failure's traceback (1 never stops).
        max_reward_parts: Named reward parts a program may return (each becomes a metric).
        max_request_bytes: Bytes of one request body (in process: characters of its messages and
            tools); larger requests are refused (HTTP 413) and fail the episode.
        max_messages: Messages of one request; more are refused (HTTP 400) and fail the episode.
        max_concurrent_calls: Calls of one episode waiting at once; more are refused (HTTP 429)
            and fail the episode.
        max_prompt_tokens: Tokens of one rendered prompt; a longer one fails the episode after
            its call. None: no limit.
        isolation: ``"thread"`` (default): the program runs in a thread of this process.
            ``"process"``: in a child process and process group of its own, killed with its
            children at the episode's end, so that neither ``os._exit``, a crash nor a process it
            leaves behind can end or outlive the trainer (POSIX only; docs/programs.md).
        test_size: Held-out share (or count) of ``tasks`` when ``test_tasks`` is not given.
        split_seed: Seed of that split.
        transport: ``"inprocess"``: the program gets a :class:`~marft_envs.programs.ProgramClient`;
            ``"http"``: it gets ``openai.OpenAI`` on the episode's own URL of a local
            OpenAI-compatible endpoint (:mod:`marft_envs.programs.server`), for frameworks.
        tool_parser: How a reply to a call with ``tools`` becomes ``tool_calls``: a name in
            :data:`~marft_envs.programs.tools.TOOL_PARSERS` (default ``"hermes"``) or a function.
        tool_prompt: None (default): tools reach the policy's chat template, which must support
            them. ``"hermes"``: the env describes them in the system prompt and writes tool calls
            and results as text, for models whose template has no tool support. An untuned
            small model rarely uses that format: SmolLM2-135M-Instruct wrote no well-formed call
            on 60 held-out tasks, greedy or at T = 1, until the program's messages held one
            example call (``benchmarks/tool_calls/RESULTS.md``: the rates and a recipe).
        render_mode: As for every :class:`~marft_envs.FlexPOMDPEnv`.
    """

    metadata = {**FlexPOMDPEnv.metadata, "name": "program_v0"}
    program: Callable[..., Any]
    reward_weights: dict[str, float]
    episode_timeout: float
    error_reward: float
    max_error_share: float
    transport: str

    def __init__(
        self,
        program: Callable[..., Any],
        agents: Iterable[str | AgentProfile | Mapping[str, Any]],
        tasks: TaskSource,
        *,
        test_tasks: TaskSource | None = None,
        split: str = "train",
        reward_weights: Mapping[str, float] | None = None,
        credit: str = "team",
        max_calls: int = 32,
        episode_timeout: float = 60.0,
        max_episode_seconds: float | None = 3600.0,
        on_error: str = "drop",
        error_reward: float = 0.0,
        max_error_share: float = 0.5,
        max_reward_parts: int = MAX_REWARD_PARTS,
        max_request_bytes: int = RequestLimits.max_request_bytes,
        max_messages: int = RequestLimits.max_messages,
        max_concurrent_calls: int = RequestLimits.max_concurrent_calls,
        max_prompt_tokens: int | None = None,
        isolation: str = "thread",
        test_size: float = 0.1,
        split_seed: int = 0,
        transport: str = "inprocess",
        tool_parser: str | ToolParser = "hermes",
        tool_prompt: str | None = None,
        render_mode: str | None = None,
    ) -> None:
        if not callable(program):
            raise TypeError(
                f"program must be a function program(task, client), got {program!r:.80}."
            )
        profiles = [AgentProfile(role=a) if isinstance(a, str) else a for a in agents]
        super().__init__(
            profiles,
            ProgramTurns(),
            horizon=max_calls,
            credit=credit,
            credit_scope="episode",
            render_mode=render_mode,
        )
        if split not in ("train", "test", "all"):
            raise ValueError(f"split must be 'train', 'test' or 'all', got {split!r}.")
        if not (finite_number(episode_timeout) and episode_timeout > 0):
            raise ValueError(
                f"episode_timeout must be a positive, finite number of seconds, got {episode_timeout!r}."
            )
        for name, value in {"error_reward": error_reward, **(reward_weights or {})}.items():
            if not finite_number(value):
                raise ValueError(f"{name} must be a finite number, got {value!r}.")
        if transport not in ("inprocess", "http"):
            raise ValueError(f"transport must be 'inprocess' or 'http', got {transport!r}.")
        if on_error not in ("drop", "reward"):
            raise ValueError(
                f"on_error must be 'drop' (failed episodes are left out of the update) or "
                f"'reward' (they are paid error_reward), got {on_error!r}."
            )
        if isolation not in ("thread", "process"):
            raise ValueError(f"isolation must be 'thread' or 'process', got {isolation!r}.")
        if max_episode_seconds is not None and not (
            finite_number(max_episode_seconds) and max_episode_seconds > 0
        ):
            raise ValueError(
                f"max_episode_seconds must be a positive number of seconds or None, got "
                f"{max_episode_seconds!r}."
            )
        for name, bound in {
            "max_reward_parts": max_reward_parts,
            "max_prompt_tokens": max_prompt_tokens,
        }.items():
            if bound is not None and (
                isinstance(bound, bool) or not isinstance(bound, int) or bound < 1
            ):
                raise ValueError(f"{name} must be a positive integer, got {bound!r}.")
        self.limits = RequestLimits(max_request_bytes, max_messages, max_concurrent_calls)
        if not 0 < max_error_share <= 1:
            raise ValueError(f"max_error_share must be in (0, 1], got {max_error_share!r}.")
        if tool_prompt is not None and tool_prompt not in TOOL_PROMPTS:
            raise ValueError(
                f"tool_prompt must be None (the chat template renders tools) or one of "
                f"{sorted(TOOL_PROMPTS)}, got {tool_prompt!r}."
            )
        self.tool_parser = resolve_parser(tool_parser)
        self.tool_prompt = tool_prompt
        self.observation_spaces = {
            a: ChatObservation(cast(ChatSpace, self.observation_spaces[a]["messages"]).max_length)
            for a in self.possible_agents
        }
        self.program = program
        self.reward_weights = {str(k): float(v) for k, v in (reward_weights or {}).items()}
        self.episode_timeout = float(episode_timeout)
        self.error_reward = float(error_reward)
        self.on_error = on_error
        self.max_error_share = float(max_error_share)
        self.max_episode_seconds = max_episode_seconds
        self.max_reward_parts = max_reward_parts
        self.max_prompt_tokens = max_prompt_tokens
        self.isolation = isolation
        self._lowest_finished: float | None = None
        self._last_prompt_tokens = 0
        self._started = 0.0
        self.split = split
        self.transport = transport
        self._server: Any = None
        self._http: Any = None
        self._episode_url: str | None = None
        source = test_tasks if split == "test" and test_tasks is not None else tasks
        if callable(source):
            self.draw_task: Callable[[np.random.Generator], Any] | None = source
            self.dataset: list[Any] | None = None
        else:
            if callable(test_tasks):
                raise TypeError("give test_tasks as a list when tasks is a list.")
            name = "test_tasks" if source is test_tasks else "tasks"
            if isinstance(source, (str, bytes)) or not isinstance(source, Sequence):
                raise TypeError(
                    f"{name} must be a non-empty list of tasks or a function of a numpy generator, "
                    f"got {source!r:.80}."
                )
            if not source:
                raise ValueError(
                    f"{name} is empty; give at least one task"
                    + (
                        " (or leave test_tasks out to hold out a share of tasks)."
                        if name == "test_tasks"
                        else "."
                    )
                )
            self.draw_task = None
            if split == "test" and test_tasks is not None:
                self.dataset = list(source)  # the held-out list (tasks may be a function)
            else:
                assert not callable(tasks)  # a function of an rng is drawn from, not split
                self.dataset = split_tasks(
                    tasks, test_tasks, split, test_size=test_size, seed=split_seed
                )
        self._run: ProgramRun | None = None
        self._event: Event | None = None
        self._usage: tuple[int, int, bool] = (0, 0, True)
        self._answered: str | None = None
        self.task: Any = None
        self._latest: dict[str, CallRecord] = {}

    # ------------------------------------------------------------------ task hooks
    def _reset_task(self, options: Mapping[str, Any] | None) -> None:
        self._stop()
        options = options or {}
        if self.dataset is not None:
            index = (
                int(options["index"])
                if "index" in options
                else int(self.np_random.integers(len(self.dataset)))
            )
            if not 0 <= index < len(self.dataset):
                raise IndexError(
                    f"options['index']={index} is outside the {len(self.dataset)} tasks."
                )
            self.task = self.dataset[index]
        else:
            assert self.draw_task is not None
            self.task = self.draw_task(self.np_random)
        program_rng = np.random.default_rng(int(self.np_random.integers(2**63)))
        self._latest, self._answered, self._usage = {}, None, (0, 0, True)
        self._last_prompt_tokens = 0
        make_client: Callable[[ProgramRun], Any]
        if self.transport == "http":
            make_client = lambda run: self._http_client(run, program_rng)  # noqa: E731
        else:
            make_client = lambda run: ProgramClient(  # noqa: E731
                self.possible_agents, run.send, program_rng, self.limits, run.refused
            )
        self._started = time.monotonic()
        self._run = ProgramRun(
            self.program,
            self.task,
            make_client,
            self.episode_timeout,
            isolation=self.isolation,
            max_pending=self.limits.max_concurrent_calls,
        )
        self._event = self._run.next_event()

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
        if call is not None and call.tools and self.tool_prompt is None:
            observation["tools"] = [dict(t) for t in call.tools]
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
        if latest is None:
            return []
        if self.tool_prompt is not None:
            return TOOL_PROMPTS[self.tool_prompt](latest.messages, latest.tools)
        return [template_message(m) for m in latest.messages]

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
        call = self._pending_call()
        prompt_tokens, completion_tokens, finished = self._usage
        self._usage = (0, 0, True)
        self._answered = text
        reply = Reply(text, finished, prompt_tokens, completion_tokens)
        if call is not None and call.tools:
            reply.content, reply.tool_calls = parse_tool_calls(text, self.tool_parser, call.index)
        self._run.answer(reply)

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
        broken = self._broken_bound()
        if broken is not None:
            self._stop()
            return self._failed(*broken, "")
        if self._event.kind == "call":
            if self.timestep + 1 >= self.horizon:
                self._stop()
                return Transition(
                    reward=self.error_reward,
                    info={**self._counts(), "program_failure": "max_calls", **self._drop()},
                )
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
        if self._run.refusals:  # a refused request fails the episode, whatever the program did then
            return self._failed(*self._run.refusals[0], "")
        if event.kind == "return":
            try:
                reward, parts = combine_reward(
                    event.value, self.reward_weights, self.max_reward_parts
                )
            except (TypeError, ValueError) as err:
                return self._failed(type(err).__name__, str(err), "")
            self._note_finished(reward)
            info: dict[str, Any] = {**self._counts(), "reward_parts": parts}
            if "success" in parts:
                info["correct"] = parts["success"] > 0
            return Transition(reward=reward, terminated=True, info=info)
        if event.kind == "timeout":
            return self._failed(
                "Timeout",
                f"the program neither called a model nor returned within episode_timeout="
                f"{self.episode_timeout:g} s",
                "",
            )
        assert event.error is not None
        return self._failed(type(event.error).__name__, str(event.error), event.traceback)

    def _failed(self, kind: str, message: str, trace: str) -> Transition:
        call = self._last_call()
        error = {
            "type": kind,
            "message": message,
            "agent": call.agent if call else None,
            "call": call.index if call else None,
            "traceback": trace,
        }
        return Transition(
            reward=self.error_reward,
            terminated=True,
            info={**self._counts(), "program_error": error, **self._drop()},
        )

    def _drop(self) -> dict[str, Any]:
        """``{"drop": True}`` under ``on_error="drop"``: trainers leave the episode out."""
        return {"drop": True} if self.on_error == "drop" else {}

    def _broken_bound(self) -> tuple[str, str] | None:
        """The first bound the episode passed, as ``(kind, message)``; None while within them."""
        assert self._run is not None
        if self._run.refusals:
            return self._run.refusals[0]
        prompt_tokens = self._last_prompt_tokens
        if self.max_prompt_tokens is not None and prompt_tokens > self.max_prompt_tokens:
            return (
                "PromptTooLong",
                f"a call's rendered prompt has {prompt_tokens} tokens, more than "
                f"max_prompt_tokens={self.max_prompt_tokens}; send shorter messages, or raise "
                f"max_prompt_tokens where the program is registered.",
            )
        elapsed = time.monotonic() - self._started
        if self.max_episode_seconds is not None and elapsed > self.max_episode_seconds:
            return (
                "Timeout",
                f"the episode ran {elapsed:.0f} s, model time included, more than "
                f"max_episode_seconds={self.max_episode_seconds:g}",
            )
        return None

    def _note_finished(self, reward: float) -> None:
        """Warn once when a failed episode would be paid more than a finished one was."""
        lowest = self._lowest_finished
        self._lowest_finished = reward if lowest is None else min(lowest, reward)
        if (
            self.on_error == "reward"
            and self.error_reward > self._lowest_finished
            and (lowest is None or self.error_reward <= lowest)
        ):
            logger.warning(
                "error_reward=%g exceeds the reward of a finished episode (%g): failing pays more "
                "than finishing, so training will teach the team to fail. Use on_error='drop' (the "
                "default) or a lower error_reward.",
                self.error_reward,
                self._lowest_finished,
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

    def _http_client(self, run: ProgramRun, rng: np.random.Generator) -> Any:
        """``openai.OpenAI`` on a fresh episode URL of the shared local endpoint."""
        from marft_envs.programs.server import shared_server

        try:
            import openai
        except ImportError:
            raise ImportError(
                "transport='http' needs the openai package: pip install 'marft[agents]'."
            ) from None
        if self._server is None:
            self._server = shared_server()
        url, counts = self._server.open(tuple(self.possible_agents), run, self.limits)
        self._episode_url = url
        if self._http is None:  # one connection pool per env copy, kept across its episodes
            self._http = loopback_http_client()
        key = url.rstrip("/").split("/")[-2]  # the episode's secret, also sent as its API key
        client = openai.OpenAI(
            base_url=url, api_key=key, max_retries=0, timeout=None, http_client=self._http
        )
        client.rng, client.counts, client.agents = rng, counts, tuple(self.possible_agents)  # type: ignore[attr-defined]
        return client

    def _stop(self) -> None:
        if self._run is not None:
            self._run.close()
        if self._server is not None and self._episode_url is not None:
            self._server.release(self._episode_url)
            self._episode_url = None

    def close(self) -> None:
        """End the episode in progress; the last env using the endpoint stops it."""
        self._stop()
        if self._http is not None:
            self._http.close()
            self._http = None
        if self._server is not None:
            from marft_envs.programs.server import release_server

            self._server = None
            release_server()
        super().close()
