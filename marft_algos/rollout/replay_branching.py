"""Branching an agent program's episode by replay (design notes §9, docs/programs.md "Replay").

A program cannot be copied at a branch point: its state lives in its running code. So where
:class:`~marft_algos.rollout.branching.BranchingCollector` copies the env, this collector takes a
fresh env copy (from ``make_env``, kept in a pool across rollouts) and replays the episode in it:
the program runs again on the same task with the same seed, and its calls before the branch point
are answered from the recorded replies without generating
(:func:`marft_envs.programs.replay.replay`). The branch call's ``width`` alternatives are sampled
once, in the original copy; every continuation is then stepped with its alternative and runs on
live. The decisions of the replayed prefix are the recorded ones, marked ``branch_copy`` (trained
once, as with copied envs), so siblings never generate their shared prefix twice.

A copy whose program does not repeat the recording (the first differing call, named in one line)
ends at once as a failed episode with ``info["drop"]``: it is never trained on, and counts against
the env's ``max_error_share`` like any failed program. A continuation whose program raises fails
on its own; the rest of its tree is kept (the tree's values leave dropped leaves out). Where the
one episode that holds a shared prefix's decisions (the others hold copies) is dropped, a kept
episode of the tree holds them instead.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from pettingzoo import AECEnv

from marft_algos.protocols import GeneratingPolicy, GenerationLike, GenerationSettings
from marft_algos.rollout.branching import (
    BranchingCollector,
    _episode_copy,
    _hand_over,
    _Slot,
)
from marft_algos.rollout.collector import (
    Decision,
    Episode,
    EpisodeRequest,
    RolloutCollector,
    _prompt,
)
from marft_envs.programs import ProgramEnv
from marft_envs.programs.replay import RecordedCall, ReplayJob, replay, request_of

__all__ = ["ReplayBranchingCollector", "branching_around", "replays"]

logger = logging.getLogger(__name__)


def replays(env: AECEnv) -> bool:
    """Whether ``env`` branches by replay rather than by copy (agent programs)."""
    return isinstance(env.unwrapped, ProgramEnv)


def branching_around(
    collector: RolloutCollector,
    branch: Mapping[str, Any],
    make_env: Callable[[], AECEnv] | None = None,
) -> BranchingCollector:
    """A branching collector on ``collector``'s envs: by replay for agent programs (copies from
    ``make_env``), by copying the env otherwise."""
    if replays(collector.envs[0]):
        return ReplayBranchingCollector.around(collector, branch, make_env)
    return BranchingCollector.around(collector, branch)


def _recorded(agent: str, generation: GenerationLike, observed: Any) -> RecordedCall:
    usage = (len(generation.prompt_ids), len(generation.action_ids), bool(generation.finished))
    return RecordedCall(agent, request_of(observed), generation.text, usage)


def _from_decision(d: Decision) -> RecordedCall:
    usage = (len(d.prompt_ids), len(d.action_ids), bool(d.finished))
    request = {"messages": d.messages, "tools": d.tools}
    return RecordedCall(d.agent, request_of(request), d.text, usage)


class ReplayBranchingCollector(BranchingCollector):
    """A :class:`BranchingCollector` that grows each continuation by replaying the episode in a
    fresh env copy instead of copying the env (see the module notes).

    Args:
        policy, envs, settings, seed, branch: As :class:`BranchingCollector`.
        make_env: Builds one more env copy (the trainer's ``env_fn``); the copies are kept for
            later rollouts and closed with the collector.

    Raises:
        ValueError: No ``make_env``.
    """

    def __init__(
        self,
        policy: GeneratingPolicy,
        envs: Sequence[AECEnv],
        settings: GenerationSettings | None = None,
        *,
        seed: int = 0,
        branch: Mapping[str, Any],
        make_env: Callable[[], AECEnv] | None = None,
    ) -> None:
        if make_env is None:
            raise ValueError(
                "An agent program branches by replaying its episode in other env copies, so the "
                "branching collector needs make_env (a function that builds one, e.g. the "
                "trainer's env_fn): ReplayBranchingCollector(..., make_env=env_fn)."
            )
        self.make_env = make_env
        self._spares: list[AECEnv] = []
        self._lent: dict[int, AECEnv] = {}
        super().__init__(policy, envs, settings, seed=seed, branch=branch)

    def _check_copies(self) -> None:
        """Nothing to copy: continuations replay in fresh copies."""

    @classmethod
    def around(
        cls,
        collector: RolloutCollector,
        branch: Mapping[str, Any],
        make_env: Callable[[], AECEnv] | None = None,
    ) -> ReplayBranchingCollector:
        """A replaying collector on ``collector``'s envs, sharing its random generators."""
        out = cls(
            collector.policy, collector.envs, collector.settings, branch=branch, make_env=make_env
        )
        out.rng, out.generator, out.on_episode = (
            collector.rng,
            collector.generator,
            collector.on_episode,
        )
        return out

    def close(self) -> None:
        """Close the env copies, the replay copies included."""
        super().close()
        for env in [*self._spares, *self._lent.values()]:
            env.close()
        self._spares.clear()
        self._lent.clear()

    def collect(
        self,
        episodes: int | Iterable[EpisodeRequest],
        settings: GenerationSettings | None = None,
    ) -> list[Episode]:
        """As :meth:`BranchingCollector.collect`; failed and mismatched continuations are among
        the episodes, marked as failures."""
        try:
            results = super().collect(episodes, settings)
        finally:
            self._spares.extend(self._lent.values())
            self._lent.clear()
        _hold_prefixes_in_kept(results)
        return results

    def _lend(self) -> AECEnv:
        env = self._spares.pop() if self._spares else self.make_env()
        self._lent[id(env)] = env
        return env

    def _give_back(self, env: AECEnv) -> None:
        if self._lent.pop(id(env), None) is not None:
            self._spares.append(env)

    def _branch(
        self, agent: str, slots: list[_Slot], settings: GenerationSettings
    ) -> list[tuple[_Slot, bool]]:
        """Sample each slot's ``width`` alternatives in one batch; the slot's own env continues
        the first, fresh copies replayed up to this call continue the others."""
        level = self.levels[agent]
        messages = [_prompt(s.env.observe(agent)) for s in slots]
        batch = [m for m in messages for _ in range(level.width)]
        generations = self.policy.generate(agent, batch, settings, generator=self.generator)
        children: list[tuple[_Slot, int]] = []  # (child, index of its slot)
        jobs: list[tuple[_Slot, ReplayJob]] = []
        for i, slot in enumerate(slots):
            calls = [_from_decision(d) for d in slot.episode.decisions]
            calls += [_recorded(a.pending.agent, a.pending.generation, a.pending.messages)
                      for a in slot.acts]  # fmt: skip
            at = RecordedCall(agent, request_of(messages[i]))
            for w in range(level.width):
                for m in range(level.rollouts):
                    first = (w, m) == (0, 0)
                    child = _Slot(
                        slot.env if first else self._lend(),
                        slot.tree,
                        (*slot.path, w, m),
                        slot.episode if first else _episode_copy(slot.episode),
                        list(slot.acts) if first else [replace(a, copy=True) for a in slot.acts],
                        slot.branched | {agent},
                    )
                    child.episode.branch = child.path
                    children.append((child, i))
                    if not first:
                        job = ReplayJob(
                            child.env, slot.episode.seed, slot.episode.options, calls, at
                        )
                        jobs.append((child, job))
        failed = {
            id(child): info
            for (child, _), info in zip(jobs, replay([j for _, j in jobs]), strict=True)
            if info is not None
        }
        if failed:
            first_error = next(iter(failed.values()))["program_error"]
            logger.warning(
                "%d of %d replayed continuation(s) dropped; the first: %s",
                len(failed),
                len(jobs),
                first_error["message"],
            )
        live = [(c, i) for c, i in children if id(c) not in failed]
        for child, i in live:  # every program gets its reply before any is waited on
            _hand_over(child.env, generations[i * level.width + child.path[-2]])
        out: list[tuple[_Slot, bool]] = []
        for child, i in children:
            if id(child) in failed:
                child.episode.info = failed[id(child)]
                child.acts.clear()
                self._lent.pop(id(child.env))
                child.env.close()  # its program still waits on a call: end it now
                out.append((child, True))
                continue
            w, m = child.path[-2:]
            generation = generations[i * level.width + w]
            node = (*slots[i].path, w)
            out.append(
                (child, self._advance(child, agent, generation, messages[i], node, copy=m > 0))
            )
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
        """As :meth:`BranchingCollector._advance`; a copy whose episode is over goes back to the
        pool."""
        done = super()._advance(slot, agent, generation, messages, node, copy=copy)
        if done:
            self._give_back(slot.env)
        return done


def _hold_prefixes_in_kept(episodes: Sequence[Episode]) -> None:
    """Where the episode holding a shared decision (``branch_copy`` False) is dropped, let the
    first kept episode of its tree that has a copy of it hold it instead."""
    holders: dict[tuple[Any, ...], list[Decision]] = {}
    for e in episodes:
        if e.branch is None:
            continue
        for position, d in enumerate(e.decisions):
            key = (e.branch[0], d.branch, position)
            holders.setdefault(key, []).append(d)
    kept = {id(d) for e in episodes if not e.info.get("drop") for d in e.decisions}
    for copies in holders.values():
        if any(not d.branch_copy and id(d) in kept for d in copies):
            continue
        heir = next((d for d in copies if id(d) in kept), None)
        if heir is None:
            continue
        for d in copies:
            d.branch_copy = d is not heir
