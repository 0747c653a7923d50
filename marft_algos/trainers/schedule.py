"""Per-agent training settings: a learning rate per agent, and agents trained in turns.

Co-adapting agents chase each other's sampling noise: while a router learns which specialist to
call, the specialists it calls change under it. Two settings damp that:

- ``agent_learning_rates``: each agent's adapter steps with its own Adam learning rate (agents
  that share one adapter share its optimizer, so they take one value);
- ``agent_schedule`` with ``schedule_period``: windows of agents trained in turns, cycling, e.g.
  ``[["router"], ["specialist", "reviewer"]]`` trains the router for ``schedule_period``
  iterations while the others act with frozen weights, then the others while the router is
  frozen. ``agent_by_agent_interval=K`` (the paper's agent-by-agent updates, §4.1.1) is the
  schedule of each trainable agent alone with period K.

The schedule has no state of its own: iteration i trains window ``(i // period) % len(windows)``,
so a resumed run (which restores the iteration) continues in the same window. An agent outside
the current window takes no optimizer step: its weights, Adam moments and step count stay as
they are. marft's learning rates are constant (no LR scheduler), so there is no schedule of
rates to hold back.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = [
    "AgentSchedule",
    "check_agent_names",
    "check_agent_settings",
]


class AgentSettings(Protocol):
    """The config fields this module reads (every ``TrainerConfig`` has them)."""

    learning_rate: float
    agent_learning_rates: dict[str, float] | None
    agent_schedule: list[list[str]] | None
    schedule_period: int
    agent_by_agent_interval: int


def check_agent_settings(config: AgentSettings) -> None:
    """Refuse malformed per-agent settings when the config is built (agent names are checked
    against the env's agents later, by :func:`check_agent_names`).

    Raises:
        ValueError: Saying which setting was wrong, with its value, and how to fix it.
    """
    rates = config.agent_learning_rates
    if rates is not None:
        if not isinstance(rates, Mapping):
            raise ValueError(
                f"agent_learning_rates must map agent names to learning rates, e.g. "
                f'{{"router": 1e-5}}, got {rates!r}.'
            )
        for agent, lr in rates.items():
            if isinstance(lr, bool) or not isinstance(lr, int | float) or not math.isfinite(lr):
                raise ValueError(
                    f"agent_learning_rates[{agent!r}] must be a finite number, got {lr!r}."
                )
            if lr < 0:
                raise ValueError(
                    f"agent_learning_rates[{agent!r}] must be >= 0, got {lr} (0 keeps the agent's "
                    f"weights where they are)."
                )
        config.agent_learning_rates = {str(a): float(lr) for a, lr in rates.items()}
    for name in ("schedule_period", "agent_by_agent_interval"):
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{name} must be a whole number, got {value!r}.")
    if config.schedule_period < 1:
        raise ValueError(
            f"schedule_period must be >= 1 (iterations per window of agent_schedule), got "
            f"{config.schedule_period}."
        )
    if config.agent_by_agent_interval < 0:
        raise ValueError(
            f"agent_by_agent_interval must be >= 0, got {config.agent_by_agent_interval}."
        )
    windows = config.agent_schedule
    if windows is None:
        if config.schedule_period != 1:
            raise ValueError(
                f"schedule_period={config.schedule_period} sets the length of agent_schedule's "
                f'windows, but no agent_schedule is set; give one (e.g. [["router"], '
                f'["actor"]]) or drop schedule_period.'
            )
        return
    if config.agent_by_agent_interval:
        raise ValueError(
            f"agent_by_agent_interval={config.agent_by_agent_interval} and agent_schedule are "
            f"two spellings of one setting (agent_by_agent_interval=K is the schedule of each "
            f"agent alone with schedule_period=K); keep one."
        )
    well_formed = isinstance(windows, list | tuple) and all(
        isinstance(w, list | tuple) and w and all(isinstance(a, str) for a in w) for w in windows
    )
    if not windows or not well_formed:
        raise ValueError(
            f"agent_schedule must be a non-empty list of non-empty lists of agent names, e.g. "
            f'[["router"], ["specialist", "reviewer"]], got {windows!r}.'
        )
    config.agent_schedule = [list(w) for w in windows]


def check_agent_names(config: AgentSettings, agents: Sequence[str]) -> None:
    """Refuse per-agent settings that name agents the env does not have, naming the known ones."""
    named = {
        "agent_learning_rates": set(config.agent_learning_rates or {}),
        "agent_schedule": {a for w in config.agent_schedule or [] for a in w},
    }
    for setting, names in named.items():
        unknown = sorted(names - set(agents))
        if unknown:
            raise ValueError(
                f"{setting} names agent(s) {unknown} that the env does not have; its agents are "
                f"{list(agents)}. Name only those."
            )


def _share_an_adapter(optimizer_of: Mapping[str, str]) -> list[list[str]]:
    """Groups of two or more agents whose adapter (so optimizer) is one."""
    groups: dict[str, list[str]] = {}
    for agent, key in optimizer_of.items():
        groups.setdefault(key, []).append(agent)
    return [g for g in groups.values() if len(g) > 1]


@dataclass(frozen=True)
class AgentSchedule:
    """Which agents take optimizer steps at each iteration.

    Attributes:
        windows: The agents of each window, in order (one window: every trainable agent).
        period: Iterations per window.
    """

    windows: tuple[tuple[str, ...], ...]
    period: int = 1

    @classmethod
    def of(cls, config: AgentSettings, optimizer_of: Mapping[str, str]) -> AgentSchedule:
        """The schedule ``config`` asks for, over the trainable agents (``optimizer_of``: agent →
        its optimizer's key, in env order; agents that share an adapter share a key).

        Raises:
            ValueError: A window names a frozen agent (no trainable parameters), or splits
                agents that share one adapter (training one would move the other).
        """
        trainable = list(optimizer_of)
        if config.agent_by_agent_interval:
            # The paper's cycle, one agent's decisions per window (an adapter shared by several
            # agents trains in each of their windows, on that agent's decisions).
            windows = tuple((a,) for a in trainable)
            return cls(windows, config.agent_by_agent_interval)
        if config.agent_schedule is None:
            return cls((tuple(trainable),))
        for window in config.agent_schedule:
            frozen = [a for a in window if a not in optimizer_of]
            if frozen:
                raise ValueError(
                    f"agent_schedule names agent(s) {frozen} that have no trainable parameters "
                    f"(frozen in the policy), so they never train; the trainable agents are "
                    f"{trainable}. Drop them from agent_schedule."
                )
            for group in _share_an_adapter(optimizer_of):
                inside = [a for a in group if a in window]
                if inside and len(inside) < len(group):
                    raise ValueError(
                        f"agent_schedule window {window} trains {inside} but not "
                        f"{[a for a in group if a not in inside]}, which share their adapter: "
                        f"training one moves the other. Put all of {group} in the same windows."
                    )
        return cls(tuple(tuple(w) for w in config.agent_schedule), config.schedule_period)

    def agents_at(self, iteration: int) -> list[str]:
        """The agents that train at ``iteration`` (counted from 0)."""
        return list(self.windows[(iteration // self.period) % len(self.windows)])
