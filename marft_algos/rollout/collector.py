"""Batched multi-agent rollouts over N env copies (the paper's rollout threads).

At every tick the collector looks at which agent each live env copy is waiting on, and generates
for all copies waiting on the same agent in one batched call. The turn order comes from the env (its
dependency function), so dynamic orders work unchanged. Every decision keeps exactly what the agent
did — prompt token ids, generated token ids, per-token log-probs — so nothing is ever re-tokenised.
After a round ends, each decision of the round receives the reward the env's credit rule gave its
agent, and the round's last decision is marked; after an episode ends its decisions are marked done.
"""

from __future__ import annotations

import time
from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from pettingzoo import AECEnv

from marft_algos.protocols import GeneratingPolicy, GenerationLike, GenerationSettings
from marft_algos.rollout.episodes import Decision, Episode, EpisodeRequest
from marft_algos.rollout.failures import failed_at
from marft_algos.rollout.prompt_limits import limit_prompts
from marft_envs.core.env import FlexPOMDPEnv, RoundRecord

__all__ = [
    "Decision",
    "Episode",
    "EpisodeRequest",
    "GenerationSettings",
    "ProgramFailures",
    "RolloutCollector",
]


@dataclass(frozen=True)
class _Pending:
    """An action of the round in progress; it becomes a :class:`Decision` when the round ends."""

    agent: str
    generation: GenerationLike
    messages: Sequence[Mapping[str, Any]] | Mapping[str, Any]  # what was rendered
    times: tuple[int, int] | None = None  # the model call's start and end, epoch ns


def _unwrapped(env: AECEnv) -> FlexPOMDPEnv:
    base = env.unwrapped
    if not isinstance(base, FlexPOMDPEnv):
        raise TypeError(
            f"RolloutCollector needs environments built on marft_envs.FlexPOMDPEnv (it reads each "
            f"finished round from env.unwrapped.last_round), got {type(base).__name__}. Subclass "
            f"FlexPOMDPEnv (docs/tutorial_custom_env.md); wrappers around one are fine."
        )
    return base


class ProgramFailures(RuntimeError):
    """Too many episodes of one rollout ended with a program error (the message has the first).

    Attributes:
        failed: The failed episodes (``info["program_error"]`` and their transcripts).
        episodes: The rollout's episode count.
        limit: The env's ``max_error_share``.
    """

    def __init__(
        self, message: str, failed: Sequence[Episode] = (), episodes: int = 0, limit: float = 0.0
    ) -> None:
        super().__init__(message)
        self.failed, self.episodes, self.limit = list(failed), episodes, limit


def _over_at_reset(env: AECEnv) -> bool:
    agent = env.agent_selection
    return bool(env.terminations.get(agent) or env.truncations.get(agent))


def _check_unseeded(settings: GenerationSettings) -> None:
    if settings.seed is not None:
        raise ValueError(
            f"RolloutCollector seeds sampling from its own seed, so its GenerationSettings take no "
            f"seed (got seed={settings.seed}); leave it None and pass RolloutCollector(seed=...)."
        )


class RolloutCollector:
    """Runs episodes on env copies with a multi-agent policy, batching generation per agent.

    Args:
        policy: Anything with ``generate(agent, messages_batch, settings, *, generator)``
            returning one :class:`~marft_algos.protocols.GenerationLike` record per observation.
        envs: The env copies (or a factory and a count via :meth:`from_factory`): PettingZoo
            envs built on :class:`~marft_envs.FlexPOMDPEnv`, wrapped or not (``marft_envs.make``
            builds them so); any other AEC env is refused.
        settings: Sampling settings (without a seed: ``seed`` seeds the sampling).
        seed: Seeds episode resets and sampling.
    """

    def __init__(
        self,
        policy: GeneratingPolicy,
        envs: Sequence[AECEnv],
        settings: GenerationSettings | None = None,
        *,
        seed: int = 0,
    ) -> None:
        if not envs:
            raise ValueError("RolloutCollector needs at least one environment copy.")
        for env in envs:
            _unwrapped(env)
        self.policy = policy
        self.envs = list(envs)
        self.settings = settings or GenerationSettings()
        _check_unseeded(self.settings)
        limit_prompts([_unwrapped(env) for env in self.envs], policy, self.settings)
        self.rng = np.random.default_rng(seed)
        self.generator = torch.Generator().manual_seed(seed)
        #: Called with each episode as it finishes (progress displays); None: nothing is called.
        self.on_episode: Callable[[Episode], None] | None = None

    def close(self) -> None:
        """Close every env copy (an env may hold threads or a local server, e.g. agent programs)."""
        for env in self.envs:
            env.close()

    @classmethod
    def from_factory(
        cls,
        policy: GeneratingPolicy,
        env_fn: Callable[[], AECEnv],
        num_envs: int,
        settings: GenerationSettings | None = None,
        *,
        seed: int = 0,
    ) -> RolloutCollector:
        """Build ``num_envs`` copies with ``env_fn``."""
        return cls(policy, [env_fn() for _ in range(num_envs)], settings, seed=seed)

    def requests(self, num_episodes: int) -> list[EpisodeRequest]:
        """``num_episodes`` fresh episode requests with seeds drawn from the collector's RNG."""
        seeds = self.rng.integers(0, 2**31 - 1, size=num_episodes)
        return [EpisodeRequest(int(s)) for s in seeds]

    def collect(
        self,
        episodes: int | Iterable[EpisodeRequest],
        settings: GenerationSettings | None = None,
    ) -> list[Episode]:
        """Run the requested episodes to completion; returns them in request order.

        Args:
            episodes: A number of fresh episodes, or explicit :class:`EpisodeRequest` objects.
            settings: Overrides the collector's sampling settings (e.g. greedy for evaluation).
        """
        settings = settings or self.settings
        _check_unseeded(settings)
        requests = self.requests(episodes) if isinstance(episodes, int) else list(episodes)
        results: list[Episode] = [
            Episode(seed=r.seed, options=dict(r.options or {}), group=r.group) for r in requests
        ]
        queue = deque(enumerate(requests))
        running: dict[int, int] = {}  # env index -> episode index
        round_buffer: dict[int, list[_Pending]] = defaultdict(list)

        def begin(env_index: int, episode_index: int, request: EpisodeRequest) -> bool:
            env = self.envs[env_index]
            results[episode_index].started_ns = time.time_ns()
            env.reset(seed=request.seed, options=dict(request.options or {}))
            if not _over_at_reset(env):
                running[env_index] = episode_index
                return True
            # Nothing to decide (e.g. a program that ended before its first call).
            results[episode_index].info = dict(env.infos[env.agent_selection])
            while env.agents:
                env.step(None)
            if self.on_episode is not None:
                self.on_episode(results[episode_index])
            return False

        def restart(idle: Sequence[int]) -> None:
            """Give the idle copies the next episodes; slow resets (agent programs up to their
            first call) of all of them run at once."""
            while idle and queue:
                given = [(i, *queue.popleft()) for i in idle[: len(queue)]]
                for env_index, _, request in given:
                    prepare = getattr(_unwrapped(self.envs[env_index]), "prepare_reset", None)
                    if prepare is not None:
                        prepare(request.seed, dict(request.options or {}))
                idle = [i for i, episode, request in given if not begin(i, episode, request)]

        restart(list(range(len(self.envs))))
        while running:
            ended: list[int] = []
            waiting: dict[str, list[int]] = defaultdict(list)
            for env_index in running:
                waiting[self.envs[env_index].agent_selection].append(env_index)
            for agent, env_indices in waiting.items():
                messages = [_prompt(self.envs[i].observe(agent)) for i in env_indices]
                started = time.time_ns()
                generations = self.policy.generate(
                    agent, messages, settings, generator=self.generator
                )
                times = (started, time.time_ns())
                for env_index, generation in zip(env_indices, generations, strict=True):
                    base = _unwrapped(self.envs[env_index])
                    base.note_generation(
                        len(generation.prompt_ids), len(generation.action_ids), generation.finished
                    )
                    # Lets slow transitions (e.g. sandboxed programs) of all copies run in parallel.
                    base.prepare_step(generation.text)
                for env_index, generation, observed in zip(
                    env_indices, generations, messages, strict=True
                ):
                    finished = self._step(
                        env_index,
                        running[env_index],
                        agent,
                        generation,
                        observed,
                        results,
                        round_buffer,
                        times,
                    )
                    if finished:
                        if self.on_episode is not None:
                            self.on_episode(results[running[env_index]])
                        del running[env_index]
                        ended.append(env_index)
            restart(ended)
        self._check_failures(results)
        return results

    def _check_failures(self, results: Sequence[Episode]) -> None:
        """Stop when more episodes failed than the env allows (``max_error_share``, e.g. agent
        programs that raise), with the first failure's traceback."""
        limit = getattr(_unwrapped(self.envs[0]), "max_error_share", None)
        failed = [e for e in results if "program_error" in e.info]
        if limit is None or not failed or len(failed) <= limit * len(results):
            return
        first = failed[0].info["program_error"]
        raise ProgramFailures(
            f"{len(failed)} of {len(results)} episodes ended with a program error, more than "
            f"max_error_share={limit:g} allows. The first (episode seed {failed[0].seed}, "
            f"{failed_at(first)}): {first.get('type')}: "
            f"{first.get('message')}\n{first.get('traceback', '')}",
            failed,
            len(results),
            limit,
        )

    def _step(
        self,
        env_index: int,
        episode_index: int,
        agent: str,
        generation: GenerationLike,
        messages: Sequence[Mapping[str, Any]] | Mapping[str, Any],
        results: list[Episode],
        round_buffer: dict[int, list[_Pending]],
        times: tuple[int, int] | None = None,
    ) -> bool:
        """Apply one generated action; returns True when the env's episode is over."""
        env = self.envs[env_index]
        base = _unwrapped(env)
        before = base.last_round
        env.step(generation.text)
        pending = round_buffer[env_index]
        pending.append(_Pending(agent, generation, messages, times))
        record = base.last_round
        if record is None or record is before:
            return False

        # The round's actions, in order, are exactly the ones buffered since it began.
        decisions = [
            _decision(episode_index, record.timestep, turn, p, record.rewards[p.agent])
            for turn, p in enumerate(pending)
        ]
        pending.clear()
        return _close_round(env, record, decisions, results[episode_index])


def _close_round(
    env: AECEnv, record: RoundRecord, decisions: list[Decision], episode: Episode
) -> bool:
    """Book a finished round's decisions and rewards into ``episode``; True when the episode is
    over (its decisions then marked done, its agents retired so the env can be reset)."""
    _credit_idle_agents(record.rewards, decisions, episode.decisions, record.timestep)
    decisions[-1].round_end = True
    episode.decisions.extend(decisions)
    episode.team_return += record.team_reward
    for a, r in record.rewards.items():
        episode.agent_returns[a] = episode.agent_returns.get(a, 0.0) + r

    if env.agents and not any(env.terminations[a] or env.truncations[a] for a in env.agents):
        return False
    truncated = any(env.truncations.values())
    for d in decisions:
        d.done, d.truncated = True, truncated
    episode.info, episode.ended_ns = dict(record.info), time.time_ns()
    while env.agents:  # retire every agent so the env is ready for the next reset
        env.step(None)
    return True


def _prompt(observation: Mapping[str, Any]) -> Any:
    """What the policy renders: the messages, or the whole observation when it offers tools."""
    return observation if observation.get("tools") else observation["messages"]


def _decision(episode: int, timestep: int, turn: int, pending: _Pending, reward: float) -> Decision:
    g = pending.generation
    observed = pending.messages
    tools = observed.get("tools") if isinstance(observed, Mapping) else None
    messages = observed["messages"] if isinstance(observed, Mapping) else observed
    return Decision(
        episode=episode,
        timestep=timestep,
        turn=turn,
        agent=pending.agent,
        prompt_ids=list(g.prompt_ids),
        action_ids=list(g.action_ids),
        log_probs=list(g.log_probs),
        text=g.text,
        finished=bool(g.finished),
        reward=reward,
        messages=[dict(m) for m in messages],
        tools=[dict(t) for t in tools] if tools else None,
        started_ns=pending.times[0] if pending.times else None,
        ended_ns=pending.times[1] if pending.times else None,
    )


def _credit_idle_agents(
    rewards: Mapping[str, float],
    round_decisions: Sequence[Decision],
    earlier: Sequence[Decision],
    timestep: int,
) -> None:
    """Give a reward paid to an agent that did not act this round to its latest decision.

    Credit rules and per-agent reward mappings may pay an agent that the dependency function left
    out of the round (a router that skipped it, say). That reward still belongs to the agent's
    policy: it lands on the agent's most recent earlier decision, as if it arrived late, without
    a discount for the rounds in between (a documented choice: the agent's clock advances only
    when it acts; an env that wants the discount pays the discounted reward itself). An agent
    that has not acted at all in the episode has no decision to carry it; dropping it silently
    would change the task, so that is an error.
    """
    acted = {d.agent for d in round_decisions}
    for agent, reward in rewards.items():
        if agent in acted or reward == 0.0:
            continue
        latest = next((d for d in reversed(earlier) if d.agent == agent), None)
        if latest is None:
            raise ValueError(
                f"Round {timestep} paid reward {reward} to agent {agent!r}, which has not acted in "
                f"this episode, so no decision of it can carry the reward to training. Pay rewards "
                f"only to agents that acted (e.g. credit='team' or 'graded'), or fold it into the "
                f"reward of an agent that acted."
            )
        latest.reward += reward
