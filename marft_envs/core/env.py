"""The Flex-POMDP as a PettingZoo AEC environment.

:class:`FlexPOMDPEnv` supplies everything that is the same for every agentic task: the turn order
and visibility decided by a :class:`~marft_envs.core.dependency.DependencyFunction`, rollout
observations, rewards under a credit-assignment rule, termination versus truncation, seeding and
rendering. A task subclasses it and supplies three things:

- :meth:`FlexPOMDPEnv._reset_task` draws a new task instance (use ``self.np_random``);
- :meth:`FlexPOMDPEnv._observation` is the env observation ``o_t^j`` for one agent, as text;
- :meth:`FlexPOMDPEnv._transition` applies ``T`` after the round and returns the team reward.

One env **timestep** is one round: the agents the dependency function schedules act once each
(one AEC ``step`` per action); after the last of them the transition runs and rewards are handed out.

Each agent's observation is ``{"messages": [...]}``, a chat transcript: the profile's system prompt,
then one user message holding the env observation followed by exactly the actions of this round
that the dependency function made visible to the agent (``message_layout="user"`` puts the system
prompt at the start of that user message instead). ``infos[agent]["visible_agents"]`` names
them. No tokenizer-specific text is ever produced here; chat templates belong to the policy.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import gymnasium
import numpy as np
from gymnasium.utils import seeding
from pettingzoo import AECEnv

from marft_envs.core.credit import CreditRule, assign_credit, resolve_credit
from marft_envs.core.data import DataFamily
from marft_envs.core.dependency import Chain, DependencyFunction, RoundState, Turn
from marft_envs.core.profiles import AgentProfile, as_profiles
from marft_envs.core.spaces import ChatSpace, TextSpace

__all__ = ["FlexPOMDPEnv", "RoundRecord", "Transition", "pick_row"]

logger = logging.getLogger(__name__)


@dataclass
class Transition:
    """What a task returns after a round.

    Attributes:
        reward: The round's team reward ``r_t``, split by the env's credit rule; or a mapping
            ``{agent: reward}`` that is used as is (agents not named get 0).
        team_reward: With a mapping ``reward``: the round's team reward ``r_t`` (what
            ``reward_mean`` and GRPO's team return count); default the mean of the mapping's
            values, so paying each of two agents 1 for a success counts as 1, not 2.
        terminated: The episode reached a terminal state (e.g. the answer was graded as final).
        info: Extra information copied into every agent's ``infos`` (e.g. ``{"correct": True}``).
    """

    reward: float | Mapping[str, float] = 0.0
    terminated: bool = False
    info: dict[str, Any] = field(default_factory=dict)
    team_reward: float | None = None


@dataclass
class RoundRecord:
    """One finished round, kept in ``env.history`` for tasks, renderers and tests."""

    timestep: int
    turns: list[Turn]
    actions: list[tuple[str, str]]
    rewards: dict[str, float]
    info: dict[str, Any]
    team_reward: float = 0.0


class FlexPOMDPEnv(AECEnv):
    """Base class for agentic multi-agent environments (paper §3.1, Flex-POMDP).

    Args:
        profiles: The team: :class:`AgentProfile` objects or dicts (``role``, ``system_prompt``,
            ``graded``, ``metadata``).
        dependency: Who acts in a round and whose actions each agent sees; defaults to
            :class:`~marft_envs.core.dependency.Chain` over the profile order.
        horizon: Maximum number of rounds; reaching it without termination truncates the episode.
        credit: Credit-assignment rule name (``"team"``, ``"graded"``, ``"last"``) or callable.
        credit_scope: Which agents the rule counts as having acted: ``"episode"`` (every agent
            that acted so far, so agents idle in the final round share the outcome) or
            ``"round"`` (only this round's agents: the behaviour before, kept for ids registered
            with it, e.g. ``debate-v0``).
        max_action_length: Longest accepted action in characters; longer actions are cut to this
            length, with a warning and ``infos[agent]["action_truncated"] = True``.
        render_mode: ``"human"`` (rich console) or ``"ansi"`` (returns a string), or None.
        system_prompts: Replace these agents' system prompts (agent → prompt); the rest of each
            profile (``graded``, ``metadata``) stays. For prompts that suit another model.
        message_layout: Where an agent's system prompt goes: ``"system"`` (a system message
            before the user message) or ``"user"`` (the start of the user message, then a blank
            line; no system message: for chat templates that add their own default system prompt,
            or small models that follow the user message more closely).
    """

    #: The values ``message_layout`` takes.
    MESSAGE_LAYOUTS: ClassVar[tuple[str, ...]] = ("system", "user")

    metadata: dict[str, Any] = {
        "name": "flex_pomdp_v0",
        "render_modes": ["human", "ansi"],
        "is_parallelizable": False,
    }
    #: How command lines name and load this task family's problems, for envs that take a
    #: ``dataset`` argument (see :mod:`marft_envs.core.data`); None: the env has no data family.
    data_family: ClassVar[DataFamily | None] = None

    def __init__(
        self,
        profiles: Iterable[AgentProfile | Mapping[str, Any]],
        dependency: DependencyFunction | None = None,
        *,
        horizon: int = 1,
        credit: str | CreditRule = "graded",
        credit_scope: str = "episode",
        max_action_length: int = 16384,
        max_observation_length: int = 262144,
        render_mode: str | None = None,
        system_prompts: Mapping[str, str] | None = None,
        message_layout: str = "system",
    ) -> None:
        super().__init__()
        self.profiles: dict[str, AgentProfile] = {p.role: p for p in as_profiles(profiles)}
        if system_prompts:
            self.profiles = with_system_prompts(self.profiles, system_prompts)
        if message_layout not in self.MESSAGE_LAYOUTS:
            raise ValueError(
                f"message_layout must be one of {list(self.MESSAGE_LAYOUTS)}, got "
                f"{message_layout!r}."
            )
        self.message_layout = message_layout
        if dependency is None:
            dependency = Chain()
        if not isinstance(dependency, DependencyFunction):
            raise TypeError(
                f"dependency must be a DependencyFunction (e.g. Chain(), Independent(), DAG(...), "
                f"Router(fn)), got {dependency!r}."
            )
        if not isinstance(horizon, int) or horizon < 1:
            raise ValueError(
                f"horizon must be a positive integer number of rounds, got {horizon!r}."
            )
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(
                f"render_mode={render_mode!r} is not supported; use one of "
                f"{self.metadata['render_modes']} or None."
            )
        self.dependency = dependency
        self.horizon = horizon
        self.credit = credit
        resolve_credit(credit)  # fail now, not at the end of the first round
        if credit_scope not in ("episode", "round"):
            raise ValueError(
                f"credit_scope must be 'episode' (every agent that acted so far shares a round's "
                f"reward) or 'round' (only this round's agents), got {credit_scope!r}."
            )
        self.credit_scope = credit_scope
        self.max_action_length = int(max_action_length)
        self.render_mode = render_mode

        self.possible_agents = list(self.profiles)
        self.dependency.reset(self.possible_agents)
        self.action_spaces = {a: TextSpace(self.max_action_length) for a in self.possible_agents}
        self.observation_spaces = {
            a: gymnasium.spaces.Dict({"messages": ChatSpace(max_observation_length)})
            for a in self.possible_agents
        }
        self.np_random, self.np_random_seed = seeding.np_random(None)
        self.history: list[RoundRecord] = []
        self.agents: list[str] = []

    # ------------------------------------------------------------------ task hooks
    def _reset_task(self, options: Mapping[str, Any] | None) -> None:
        """Draw a new task instance. Use ``self.np_random`` for all randomness."""
        raise NotImplementedError

    def _observation(self, agent: str) -> str:
        """The env observation ``o_t^agent`` as text (without other agents' actions this round)."""
        raise NotImplementedError

    def _transition(self, actions: Mapping[str, str]) -> Transition:
        """Apply the transition after a round; ``actions`` maps each agent that acted to its action."""
        raise NotImplementedError

    def prepare_step(self, action: str) -> None:
        """Hint that ``action`` is about to be stepped for the current agent (default: nothing).

        Batched collectors call it on every env copy before stepping them, so a task whose
        transition is slow (e.g. running a program) can start the work for all copies at once.
        """

    def note_generation(self, prompt_tokens: int, completion_tokens: int, finished: bool) -> None:
        """What the policy read and wrote for the action about to be stepped (default: ignored).

        Collectors call it before :meth:`step`, so a task can count tokens (e.g. a cost per token)
        or tell a reply cut at the token budget from a finished one.
        """

    def _route_context(self) -> Mapping[str, Any]:
        """State exposed to dependency functions as ``RoundState.context`` (default: nothing)."""
        return {}

    def _format_visible(self, agent: str, visible: Sequence[tuple[str, str]]) -> str:
        """How the actions an agent may see are written into its user message."""
        return "\n\n".join(f"[{role}]\n{action}" for role, action in visible)

    # ------------------------------------------------------------------ PettingZoo API
    def observation_space(self, agent: str) -> gymnasium.spaces.Space:
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> gymnasium.spaces.Space:
        return self.action_spaces[agent]

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        if seed is not None:
            self.np_random, self.np_random_seed = seeding.np_random(seed)
        self.agents = list(self.possible_agents)
        self.rewards = dict.fromkeys(self.agents, 0.0)
        self._cumulative_rewards = dict.fromkeys(self.agents, 0.0)
        self.terminations = dict.fromkeys(self.agents, False)
        self.truncations = dict.fromkeys(self.agents, False)
        self.infos: dict[str, dict[str, Any]] = {a: {} for a in self.agents}
        self.timestep = 0
        self.history = []
        self._visible: dict[str, tuple[str, ...]] = {}
        self._round_result: dict[str, Any] = {}
        self.dependency.reset(self.possible_agents)
        self._reset_task(options)
        self._start_round()

    def observe(self, agent: str) -> dict[str, list[dict[str, str]]]:
        return {"messages": self.rollout_messages(agent)}

    def rollout_messages(self, agent: str) -> list[dict[str, str]]:
        """Agent's rollout observation ``ô``: profile + env observation + visible actions (§3.1)."""
        if agent not in self.profiles:
            raise KeyError(f"Unknown agent {agent!r}; the team is {self.possible_agents}.")
        profile = self.profiles[agent]
        visible = self._visible_actions(agent)
        content = self._observation(agent)
        if visible:
            content = f"{content}\n\n{self._format_visible(agent, visible)}"
        if profile.system_prompt and self.message_layout == "user":
            return [{"role": "user", "content": f"{profile.system_prompt}\n\n{content}"}]
        messages = []
        if profile.system_prompt:
            messages.append({"role": "system", "content": profile.system_prompt})
        messages.append({"role": "user", "content": content})
        return messages

    def step(self, action: str | None) -> None:
        if not self.agents:
            raise RuntimeError(
                "step() was called after the episode ended (no live agents). Call reset() to start "
                "a new episode."
            )
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        action = self._check_action(agent, action)

        self._cumulative_rewards[agent] = 0.0
        self._clear_rewards()
        self._round.actions.append((agent, action))

        turn = self._schedule()
        if turn is not None:
            self._select(turn)
            return
        self._end_round()

    def render(self) -> str | None:
        if self.render_mode is None:
            gymnasium.logger.warn(
                "render() called without a render_mode; pass render_mode='ansi' or 'human'."
            )
            return None
        from marft_envs.core.rendering import render_transcript

        return render_transcript(self, self.render_mode)

    def close(self) -> None:
        pass

    @property
    def last_round(self) -> RoundRecord | None:
        """The episode's latest finished round (None until the first round ends).

        A new record appears each time a round ends, so a caller that steps the env learns that
        the round ended, and what it paid, from this one property.
        """
        return self.history[-1] if self.history else None

    # ------------------------------------------------------------------ internals
    @property
    def round_state(self) -> RoundState:
        """The round in progress (what the dependency function sees)."""
        return self._round

    def _visible_actions(self, agent: str) -> list[tuple[str, str]]:
        sees = self._visible.get(agent, ())
        return [(a, act) for a, act in self._round.actions if a in sees]

    def _check_action(self, agent: str, action: Any) -> str:
        if action is None:
            raise ValueError(
                f"Agent {agent!r} is still live, so step() needs its text action; None is only for "
                f"agents whose episode is over (terminated or truncated)."
            )
        if not isinstance(action, str):
            raise TypeError(
                f"Agent {agent!r}'s action must be a str (the agent's generated text), got "
                f"{type(action).__name__}: {action!r:.80}. Decode token ids to text first."
            )
        if len(action) > self.max_action_length:
            logger.warning(
                "Action of %r has %d characters, more than max_action_length=%d; it is cut to that "
                "length (raise max_action_length to keep it whole).",
                agent,
                len(action),
                self.max_action_length,
            )
            self.infos[agent]["action_truncated"] = True
            action = action[: self.max_action_length]
        return action

    def _start_round(self) -> None:
        self._round = RoundState(
            timestep=self.timestep,
            agents=tuple(self.possible_agents),
            context=dict(self._route_context()),
        )
        self._visible = {}
        turn = self._schedule()
        if turn is None:
            raise RuntimeError(
                f"{self.dependency!r} scheduled no agent in round {self.timestep}; a round needs at "
                f"least one turn."
            )
        self._select(turn)

    def _schedule(self) -> Turn | None:
        turn = self.dependency.next_turn(self._round)
        if turn is None:
            return None
        return self.dependency.validate(turn, self._round)

    def _select(self, turn: Turn) -> None:
        self._round.turns.append(turn)
        self._visible[turn.agent] = turn.sees
        self.agent_selection = turn.agent
        # The last finished round's result (team reward, task info) stays visible until the next.
        self.infos[turn.agent] = {
            **self._round_result,
            "timestep": self.timestep,
            "turn": len(self._round.actions),
            "visible_agents": list(turn.sees),
        }

    def _acted_in_episode(self) -> tuple[str, ...]:
        """Every agent that acted in the episode so far, ordered by its latest action (this
        round's last agent last): the ``acted`` a credit rule receives."""
        order: dict[str, None] = {}
        for record in self.history:
            for agent, _ in record.actions:
                order.pop(agent, None)
                order[agent] = None
        for agent in self._round.acted:
            order.pop(agent, None)
            order[agent] = None
        return tuple(order)

    def _end_round(self) -> None:
        actions = dict(self._round.actions)
        result = self._transition(actions)
        if not isinstance(result, Transition):
            raise TypeError(
                f"{type(self).__name__}._transition must return a Transition, got {result!r}."
            )
        if isinstance(result.reward, Mapping):
            unknown = set(result.reward) - set(self.profiles)
            if unknown:
                raise ValueError(f"Transition reward names unknown agent(s) {sorted(unknown)}.")
            rewards = {a: float(result.reward.get(a, 0.0)) for a in self.profiles}
            paid = [float(v) for v in result.reward.values()]
            team_reward = (
                float(result.team_reward)
                if result.team_reward is not None
                else (sum(paid) / len(paid) if paid else 0.0)
            )
        else:
            if result.team_reward is not None:
                raise ValueError(
                    f"{type(self).__name__}._transition set team_reward={result.team_reward!r} with "
                    f"a single reward {result.reward!r}; team_reward is only for a per-agent reward "
                    f"mapping (a single reward is the team reward)."
                )
            team_reward = float(result.reward)
            acted = (
                self._acted_in_episode() if self.credit_scope == "episode" else self._round.acted
            )
            rewards = assign_credit(self.credit, team_reward, acted, self.profiles)
        self.history.append(
            RoundRecord(
                timestep=self.timestep,
                turns=list(self._round.turns),
                actions=list(self._round.actions),
                rewards=rewards,
                info=dict(result.info),
                team_reward=team_reward,
            )
        )
        self.timestep += 1
        terminated = bool(result.terminated)
        truncated = not terminated and self.timestep >= self.horizon

        self.rewards = {a: rewards[a] for a in self.agents}
        self._accumulate_rewards()
        self._round_result = {
            **result.info,
            "team_reward": team_reward,
            "round_actions": [agent for agent, _ in self._round.actions],
        }
        for a in self.agents:
            self.infos[a] = {**self.infos.get(a, {}), **self._round_result}
        if terminated or truncated:
            for a in self.agents:
                self.terminations[a] = terminated
                self.truncations[a] = truncated
            self.agent_selection = self.agents[0]
        else:
            self._start_round()


def with_system_prompts(
    profiles: Mapping[str, AgentProfile], prompts: Mapping[str, str]
) -> dict[str, AgentProfile]:
    """``profiles`` with the system prompts of the agents ``prompts`` names replaced."""
    if not isinstance(prompts, Mapping):
        raise TypeError(
            f"system_prompts must map agent names to prompts, got {type(prompts).__name__}."
        )
    unknown = sorted(set(prompts) - set(profiles))
    if unknown:
        raise ValueError(
            f"system_prompts names agent(s) {unknown} that are not in the team "
            f"{list(profiles)}; use those names."
        )
    out = dict(profiles)
    for agent, prompt in prompts.items():
        if not isinstance(prompt, str):
            raise TypeError(
                f"The system prompt for {agent!r} must be a string, got {type(prompt).__name__}."
            )
        out[agent] = dataclasses.replace(profiles[agent], system_prompt=prompt)
    return out


def pick_row(dataset: Any, options: Mapping[str, Any] | None, rng: np.random.Generator) -> Any:
    """The task of a dataset-backed env's episode: row ``options["index"]`` if given (pinned
    evaluation), else one drawn with the env's ``rng`` (``dataset.sample(rng)``)."""
    options = options or {}
    if "index" not in options:
        return dataset.sample(rng)
    index = int(options["index"])
    if not 0 <= index < len(dataset):
        raise IndexError(f"options['index']={index} is outside the dataset (size {len(dataset)}).")
    return dataset[index]
