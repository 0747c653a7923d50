"""Branching a team's episode at an agent's turn, for Flex-POMDP envs (design notes §9).

With ``branch={"router": {"width": 3, "rollouts": 4}}``, when the router is about to act the
collector copies the env (its ``clone()`` if the env defines one, else ``copy.deepcopy``), samples
``width`` alternative actions from the same observation in one batch, and runs each alternative in
``rollouts`` copies of the state, which the rest of the team continues independently. Naming more
agents nests: each continuation branches again at the next named agent that acts (once per agent
and lineage), so a tree has up to the product of ``width × rollouts`` over the levels of episodes.

Every finished episode of the tree is returned with its leaf path ``Episode.branch = (request,
w1, m1, w2, m2, ...)``; each decision records its node ``Decision.branch``: ``(request,)`` before
the first branch point, ``(request, w1)`` for the branched decision, ``(request, w1, m1)`` after
it, and so on. The shared prefix is in every episode of the tree, marked ``branch_copy`` except
in the first episode that holds it (it is trained once). Generation stays batched: every live copy
of every tree waiting on the same agent generates in one call.

A copied env shares nothing with its original, its random generator included: continuations
differ through the policy's sampling, the state they start from is the same.
"""

from __future__ import annotations

import copy
from collections import defaultdict, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pettingzoo import AECEnv

from marft_algos.protocols import GeneratingPolicy, GenerationLike, GenerationSettings
from marft_algos.rollout.branch_settings import BranchLevel, branch_levels, episodes_per_tree
from marft_algos.rollout.collector import (
    Decision,
    Episode,
    EpisodeRequest,
    RolloutCollector,
    _check_unseeded,
    _close_round,
    _decision,
    _over_at_reset,
    _Pending,
    _prompt,
    _unwrapped,
)
from marft_envs.programs import ProgramEnv

__all__ = ["BranchLevel", "BranchingCollector", "EnvNotCopyable", "copy_env", "episodes_per_tree"]


class EnvNotCopyable(TypeError):
    """The env cannot be copied at a branch point (the message names the fix)."""


def copy_env(env: AECEnv) -> AECEnv:
    """An independent copy of ``env`` and its wrappers: the base env's ``clone()`` if it defines
    one (the wrappers are deep-copied around it), else ``copy.deepcopy``.

    Raises:
        EnvNotCopyable: Agent programs (which branch by replay, not by copy), or a copy that failed.
    """
    base = _unwrapped(env)
    name = type(base).__name__
    if isinstance(base, ProgramEnv):
        raise EnvNotCopyable(
            f"branch cannot copy {name}: an agent program's state lives in its running code, so "
            f"it branches by replaying the program (ReplayBranchingCollector in "
            f"marft_algos.rollout.replay_branching, which the trainers pick for program envs)."
        )
    clone = getattr(base, "clone", None)
    try:
        if callable(clone):
            return copy.deepcopy(env, memo={id(base): clone()})
        return copy.deepcopy(env)
    except Exception as exc:  # what deepcopy raises depends on the object it meets
        raise EnvNotCopyable(
            f"branch needs a copy of the env's state at the branch point, but copying {name} "
            f"failed ({type(exc).__name__}: {exc}). Define {name}.clone() returning an independent "
            f"copy of its state (rebuild what cannot be copied, such as locks, threads or open "
            f"files, and copy the task's fields), or train without branch."
        ) from exc


@dataclass(frozen=True)
class _Act:
    """An action of the round in progress, with its node in the tree and whether it is a copy."""

    pending: _Pending
    node: tuple[int, ...]
    copy: bool


@dataclass
class _Slot:
    """One live copy: its env, its episode so far, the round in progress and its lineage."""

    env: AECEnv
    tree: int
    path: tuple[int, ...]
    episode: Episode
    acts: list[_Act] = field(default_factory=list)
    branched: frozenset[str] = frozenset()


def _hand_over(env: AECEnv, generation: GenerationLike) -> None:
    """Tell the env the action about to be stepped (its token counts, then the action), so that
    slow transitions of many copies run together before any is stepped."""
    base = _unwrapped(env)
    base.note_generation(
        len(generation.prompt_ids), len(generation.action_ids), generation.finished
    )
    base.prepare_step(generation.text)


def _copied(d: Decision) -> Decision:
    return replace(d, branch_copy=True)


class BranchingCollector(RolloutCollector):
    """A :class:`RolloutCollector` whose every requested episode grows into a branch tree.

    Args:
        policy, envs, settings, seed: As :class:`RolloutCollector`; ``envs`` are the trees' roots
            (as many trees run at once), their copies the continuations.
        branch: ``{agent: {"width": W, "rollouts": M}}`` (see :func:`branch_levels`).

    Raises:
        EnvNotCopyable: The env cannot be copied (checked once, on a reset copy).
    """

    def __init__(
        self,
        policy: GeneratingPolicy,
        envs: Sequence[AECEnv],
        settings: GenerationSettings | None = None,
        *,
        seed: int = 0,
        branch: Mapping[str, Any],
    ) -> None:
        super().__init__(policy, envs, settings, seed=seed)
        self.levels = {level.agent: level for level in branch_levels(branch)}
        missing = sorted(set(self.levels) - set(self.envs[0].possible_agents))
        if missing:
            raise ValueError(
                f"branch names agent(s) {missing} that the env does not have; its agents are "
                f"{list(self.envs[0].possible_agents)}."
            )
        self._check_copies()

    def _check_copies(self) -> None:
        """Refuse an env that cannot be copied (checked once, on a reset copy)."""
        probe = copy_env(self.envs[0])
        probe.reset(seed=0)
        copy_env(probe)  # the state the branch points will copy: after a reset

    @classmethod
    def around(cls, collector: RolloutCollector, branch: Mapping[str, Any]) -> BranchingCollector:
        """A branching collector on ``collector``'s envs, sharing its random generators."""
        out = cls(collector.policy, collector.envs, collector.settings, branch=branch)
        out.rng, out.generator, out.on_episode = (
            collector.rng,
            collector.generator,
            collector.on_episode,
        )
        return out

    @property
    def episodes_per_tree(self) -> int:
        """Episodes one tree holds when every continuation reaches every branch point."""
        return episodes_per_tree(list(self.levels.values()))

    def collect(
        self,
        episodes: int | Iterable[EpisodeRequest],
        settings: GenerationSettings | None = None,
    ) -> list[Episode]:
        """Grow one tree per request; returns every finished episode, tree by tree in request
        order, each tree's episodes in the order of their paths."""
        settings = settings or self.settings
        _check_unseeded(settings)
        requests = self.requests(episodes) if isinstance(episodes, int) else list(episodes)
        trees: list[list[Episode]] = [[] for _ in requests]
        queue = deque(enumerate(requests))
        free = list(range(len(self.envs)))
        root_of: dict[int, int] = {}  # tree -> the root env it holds until all its copies end
        live: list[_Slot] = []

        def finish(slot: _Slot) -> None:
            trees[slot.tree].append(slot.episode)
            if self.on_episode is not None:
                self.on_episode(slot.episode)

        def start() -> None:
            while queue and free:
                tree, request = queue.popleft()
                env = self.envs[free[0]]
                env.reset(seed=request.seed, options=dict(request.options or {}))
                episode = Episode(
                    seed=request.seed,
                    options=dict(request.options or {}),
                    group=request.group,
                    branch=(tree,),
                )
                if _over_at_reset(env):  # nothing to decide: a tree of one empty episode
                    episode.info = dict(env.infos[env.agent_selection])
                    while env.agents:
                        env.step(None)
                    finish(_Slot(env, tree, (tree,), episode))
                    continue
                root_of[tree] = free.pop(0)
                live.append(_Slot(env, tree, (tree,), episode))

        start()
        while live:
            waiting: dict[str, list[_Slot]] = defaultdict(list)
            branching: dict[str, list[_Slot]] = defaultdict(list)
            for slot in live:
                agent = slot.env.agent_selection
                at_branch = agent in self.levels and agent not in slot.branched
                (branching if at_branch else waiting)[agent].append(slot)
            stepped: list[tuple[_Slot, bool]] = []
            for agent, slots in branching.items():
                stepped += self._branch(agent, slots, settings)
            for agent, slots in waiting.items():
                messages = [_prompt(s.env.observe(agent)) for s in slots]
                generations = self.policy.generate(
                    agent, messages, settings, generator=self.generator
                )
                for slot, generation in zip(slots, generations, strict=True):
                    _hand_over(slot.env, generation)  # slow transitions (programs) run at once
                for slot, generation, observed in zip(slots, generations, messages, strict=True):
                    done = self._advance(slot, agent, generation, observed, slot.path, copy=False)
                    stepped.append((slot, done))
            live.clear()
            for slot, done in stepped:
                if done:
                    finish(slot)
                else:
                    live.append(slot)
            running = {slot.tree for slot in live}
            for tree in [t for t in root_of if t not in running]:
                free.append(root_of.pop(tree))
            free.sort()
            start()
        results = [e for tree in trees for e in sorted(tree, key=lambda e: e.branch or ())]
        for index, episode in enumerate(results):
            for d in episode.decisions:
                d.episode = index
        self._check_failures(results)
        return results

    def _branch(
        self, agent: str, slots: list[_Slot], settings: GenerationSettings
    ) -> list[tuple[_Slot, bool]]:
        """Sample each slot's ``width`` alternatives in one batch, then step every alternative in
        ``rollouts`` copies of the slot (the slot's own env serves the first copy)."""
        level = self.levels[agent]
        messages = [_prompt(s.env.observe(agent)) for s in slots]
        batch = [m for m in messages for _ in range(level.width)]
        generations = self.policy.generate(agent, batch, settings, generator=self.generator)
        out: list[tuple[_Slot, bool]] = []
        for i, slot in enumerate(slots):
            alternatives = generations[i * level.width : (i + 1) * level.width]
            # Every copy (env, episode so far, round in progress) is taken before any is stepped.
            children = [
                _Slot(
                    slot.env if first else copy_env(slot.env),
                    slot.tree,
                    (*slot.path, w, m),
                    slot.episode if first else _episode_copy(slot.episode),
                    list(slot.acts) if first else [replace(a, copy=True) for a in slot.acts],
                    slot.branched | {agent},
                )
                for w in range(level.width)
                for m in range(level.rollouts)
                for first in [(w, m) == (0, 0)]
            ]
            for child in children:
                child.episode.branch = child.path
                w, m = child.path[-2:]
                node = (*slot.path, w)
                done = self._advance(child, agent, alternatives[w], messages[i], node, copy=m > 0)
                out.append((child, done))
        return out

    def _advance(
        self,
        slot: _Slot,
        agent: str,
        generation: GenerationLike,
        messages: Sequence[Mapping[str, Any]] | Mapping[str, Any],
        node: tuple[int, ...],
        *,
        copy: bool,
    ) -> bool:
        """Apply one action to the slot's env (as :meth:`RolloutCollector._step`); True when its
        episode is over."""
        env, base = slot.env, _unwrapped(slot.env)
        _hand_over(env, generation)  # again: idempotent where the round already had it
        before = base.last_round
        env.step(generation.text)
        slot.acts.append(_Act(_Pending(agent, generation, messages), node, copy))
        record = base.last_round
        if record is None or record is before:
            return False
        decisions = []
        for turn, act in enumerate(slot.acts):
            d = _decision(0, record.timestep, turn, act.pending, record.rewards[act.pending.agent])
            d.branch, d.branch_copy = act.node, act.copy
            decisions.append(d)
        slot.acts.clear()
        return _close_round(env, record, decisions, slot.episode)


def _episode_copy(episode: Episode) -> Episode:
    """The episode so far for another branch: its decisions copied and marked as copies."""
    return replace(
        episode,
        options=dict(episode.options),
        decisions=[_copied(d) for d in episode.decisions],
        agent_returns=dict(episode.agent_returns),
        info=dict(episode.info),
    )
