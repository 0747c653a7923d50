"""Which agent's training moved the team: held-out evaluations with some agents' adapters off.

A team's gain can hide an agent that got worse. The attribution evaluation runs the same pinned
held-out episodes (:func:`~marft_algos.rollout.evaluation.evaluation_requests`) under several
settings, each a set of *untuned* agents that act with the plain base model (their adapters off,
which is their state before training: a fresh LoRA adapter leaves the base unchanged):

- ``all tuned``: every agent with its trained adapter (the run's result);
- ``all untuned``: every agent with the base model (the team before training);
- ``<agent> reverted``: every agent tuned but that one;
- ``<agent> alone tuned``: that agent tuned, every other one untuned.

With n agents that is 2n + 2 settings; settings that untune the same agents are run once (with two
agents, ``a reverted`` is ``b alone tuned``: 4 distinct settings). Every setting is compared with
``all tuned`` episode by episode (:mod:`marft_algos.rollout.paired`). Reading it: an agent whose
reversion costs nothing did not contribute; one whose reversion *helps* regressed; ``alone
tuned`` minus ``all untuned`` is what the agent's training gives on its own.

Greedy decoding is deterministic, so an agent that reads the same observation with the same
adapter state answers the same: :class:`SettingsPolicy` keeps those generations and reuses them
across settings (the first agent of a team, for instance, is generated only twice, once tuned and
once untuned), which makes the 2n + 2 settings cost far less than 2n + 2 evaluations.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from marft_algos.protocols import GenerationSettings, Messages
from marft_algos.rollout.collector import Episode
from marft_algos.rollout.evaluation import episode_correct, standard_error
from marft_algos.rollout.failures import failure_kind
from marft_algos.rollout.paired import paired_comparison, paired_difference

__all__ = [
    "ALL_TUNED",
    "ALL_UNTUNED",
    "AttributionSetting",
    "SettingsPolicy",
    "attribution_rows",
    "attribution_settings",
    "collect_settings",
]

ALL_TUNED = "all tuned"
ALL_UNTUNED = "all untuned"


@dataclass(frozen=True)
class AttributionSetting:
    """A named setting: the agents that act untuned."""

    name: str
    untuned: frozenset[str]


def attribution_settings(agents: Sequence[str]) -> list[AttributionSetting]:
    """The 2n + 2 settings of an n-agent team, in the order they are reported; settings that
    untune the same agents are one, named by all their names joined with `` = `` (with two
    agents, ``a reverted = b alone tuned``)."""
    everyone = frozenset(agents)
    named = [(ALL_TUNED, frozenset[str]()), (ALL_UNTUNED, everyone)]
    named += [(f"{a} reverted", frozenset({a})) for a in agents]
    named += [(f"{a} alone tuned", everyone - {a}) for a in agents]
    names: dict[frozenset[str], list[str]] = {}
    for name, untuned in named:
        names.setdefault(untuned, []).append(name)
    return [AttributionSetting(" = ".join(n), untuned) for untuned, n in names.items()]


class SettingsPolicy:
    """A policy whose :attr:`untuned` agents act with the base model, reusing greedy generations.

    Wraps a policy with ``generate(agent, messages_batch, settings, *, generator)`` and
    ``untuned(agents)`` (a :class:`~marft_algos.policy.MultiAgentPolicy`). Set :attr:`untuned`
    before each collection. Greedy generations are cached by (agent, tuned or not, observation)
    and reused: the same observation and weights give the same greedy answer. Sampled
    generations are never cached.

    Args:
        policy: The policy to wrap.
    """

    def __init__(self, policy: Any) -> None:
        self.policy = policy
        self.untuned: frozenset[str] = frozenset()
        self._cache: dict[tuple[str, bool, str], Any] = {}
        #: Generations run / reused from the cache (how much the reuse saved).
        self.generated = 0
        self.reused = 0

    def generate(
        self,
        agent: str,
        messages_batch: Sequence[Messages],
        settings: GenerationSettings,
        *,
        generator: torch.Generator | None = None,
    ) -> list[Any]:
        """The wrapped policy's generations, with the agent's adapter off when it is untuned."""
        # A frozen agent's adapter never trained: it is its own untuned state.
        tuned = agent not in self.untuned or not self._trainable(agent)
        if settings.do_sample:
            self.generated += len(messages_batch)
            return self._generate(agent, tuned, messages_batch, settings, generator)
        keys = [(agent, tuned, json.dumps(m, sort_keys=True, default=repr)) for m in messages_batch]
        missing = {k: m for k, m in zip(keys, messages_batch, strict=True) if k not in self._cache}
        if missing:
            new = self._generate(agent, tuned, list(missing.values()), settings, generator)
            self._cache.update(zip(missing, new, strict=True))
        self.generated += len(missing)
        self.reused += len(keys) - len(missing)
        return [self._cache[k] for k in keys]

    def _trainable(self, agent: str) -> bool:
        is_trainable = getattr(self.policy, "is_trainable", None)
        return True if is_trainable is None else bool(is_trainable(agent))

    def _generate(
        self,
        agent: str,
        tuned: bool,
        messages_batch: Sequence[Messages],
        settings: GenerationSettings,
        generator: torch.Generator | None,
    ) -> list[Any]:
        if tuned:
            return list(self.policy.generate(agent, messages_batch, settings, generator=generator))
        with self.policy.untuned([agent]):
            return list(self.policy.generate(agent, messages_batch, settings, generator=generator))

    def __getattr__(self, name: str) -> Any:
        # Everything but generate (agents' names, tokenizers, ...) is the wrapped policy's.
        return getattr(self.policy, name)


def collect_settings(
    policy: SettingsPolicy,
    collect: Callable[[], list[Episode]],
    settings: Sequence[AttributionSetting],
) -> dict[frozenset[str], list[Episode]]:
    """Run ``collect`` once per distinct untuned set of ``settings``; episodes by untuned set."""
    out: dict[frozenset[str], list[Episode]] = {}
    for setting in settings:
        if setting.untuned not in out:
            policy.untuned = setting.untuned
            out[setting.untuned] = collect()
    policy.untuned = frozenset()
    return out


def attribution_rows(
    settings: Sequence[AttributionSetting], episodes: Mapping[frozenset[str], Sequence[Episode]]
) -> list[dict[str, Any]]:
    """Each setting's team accuracy and mean team return, with the paired difference to
    ``all tuned`` (same episodes, same order) and its standard error.

    A failed episode (its agent program raised, timed out, ...) counts as wrong; its return is
    what the env paid it, not what the team earned, so reward means are over the finished
    episodes and the paired reward difference over those that finished in both settings.

    Returns:
        One dict per setting: ``setting``, ``untuned`` (sorted names), ``episodes``,
        ``episodes_failed`` (how many), ``accuracy``, ``accuracy_se``, ``reward_mean`` (None when
        none finished), ``accuracy_difference`` and ``accuracy_difference_se`` (setting minus all
        tuned, paired), ``wrong_to_right`` and ``right_to_wrong`` (episodes that changed from all
        tuned), ``p_value`` (McNemar's exact test), ``reward_difference`` and
        ``reward_difference_se`` (None when no episode finished in both).
    """
    reference = list(episodes[frozenset()])
    base_correct = [episode_correct(e) for e in reference]
    rows = []
    for setting in settings:
        mine = list(episodes[setting.untuned])
        if [(e.seed, e.options) for e in mine] != [(e.seed, e.options) for e in reference]:
            raise ValueError(
                f"Setting {setting.name!r} ran other episodes than {ALL_TUNED!r}; the paired "
                f"comparison needs the same held-out episodes in the same order."
            )
        correct = [episode_correct(e) for e in mine]
        accuracy = paired_comparison(base_correct, correct)
        finished = [e for e in mine if failure_kind(e) is None]
        pairs = [
            (b.team_return, e.team_return)
            for b, e in zip(reference, mine, strict=True)
            if failure_kind(b) is None and failure_kind(e) is None
        ]
        reward, reward_se = paired_difference(*zip(*pairs, strict=True)) if pairs else (None, None)
        rows.append(
            {
                "setting": setting.name,
                "untuned": sorted(setting.untuned),
                "episodes": len(mine),
                "episodes_failed": len(mine) - len(finished),
                "accuracy": accuracy.after,
                "accuracy_se": standard_error(accuracy.after, len(mine)),
                "reward_mean": (
                    sum(e.team_return for e in finished) / len(finished) if finished else None
                ),
                "accuracy_difference": accuracy.difference,
                "accuracy_difference_se": accuracy.se,
                "wrong_to_right": accuracy.wrong_to_right,
                "right_to_wrong": accuracy.right_to_wrong,
                "p_value": accuracy.p_value,
                "reward_difference": reward,
                "reward_difference_se": reward_se,
            }
        )
    return rows
