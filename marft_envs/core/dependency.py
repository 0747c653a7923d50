"""Dependency functions: who acts next in a round and whose actions they see.

The paper's Flex-POMDP (§3.1) has a dependency function ``D_t(a^i, a^j) ∈ {0, 1}``: agent ``j``'s
action depends on agent ``i``'s. Here a dependency function is an object that schedules one round
incrementally: given the actions taken so far in the round it returns the next :class:`Turn`
(an agent and the agents whose actions it sees), or ``None`` when the round is over. Because each turn
can only see agents that already acted, every schedule is a topological order of its ``D_t``; because
the function sees the round so far, the schedule may change every round and even inside a round
(an orchestrator's output naming the next specialist).

Writing your own takes a few lines::

    class RoundRobinFirst(DependencyFunction):
        # the agent that starts rotates every round; everyone sees everyone before them
        def next_turn(self, state):
            order = state.agents[state.timestep % len(state.agents):] + state.agents[: state.timestep % len(state.agents)]
            if len(state.actions) == len(order):
                return None
            return Turn(order[len(state.actions)], sees=state.acted)
"""

from __future__ import annotations

import graphlib
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "DAG",
    "Chain",
    "DependencyFunction",
    "Independent",
    "Orchestrator",
    "RoundState",
    "Router",
    "Turn",
    "check_members",
]


@dataclass(frozen=True)
class Turn:
    """One scheduled decision: ``agent`` acts next and sees the actions of ``sees`` (this round)."""

    agent: str
    sees: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "sees", tuple(self.sees))


@dataclass
class RoundState:
    """What a dependency function may look at when it schedules a turn.

    Attributes:
        timestep: Index of the current round (env timestep ``t``), from 0.
        agents: All agents of the team, in profile order.
        actions: ``(agent, action)`` pairs taken so far this round, in order.
        turns: The turns scheduled so far this round (same order as ``actions``, plus the pending one).
        context: Task-provided state for routers (e.g. the problem's subject); read-only by convention.
    """

    timestep: int
    agents: tuple[str, ...]
    actions: list[tuple[str, str]] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    context: Mapping[str, Any] = field(default_factory=dict)

    @property
    def acted(self) -> tuple[str, ...]:
        """Agents that already acted this round, in order."""
        return tuple(agent for agent, _ in self.actions)

    def action_of(self, agent: str) -> str:
        """The action ``agent`` took this round (KeyError if it has not acted)."""
        for name, action in self.actions:
            if name == agent:
                return action
        raise KeyError(
            f"{agent!r} has not acted in round {self.timestep}; acted: {list(self.acted)}"
        )

    def dependency_matrix(self) -> np.ndarray:
        """The realised ``D_t`` as an (n_agents, n_agents) 0/1 matrix: ``D[i, j] = 1`` iff j saw i."""
        index = {agent: k for k, agent in enumerate(self.agents)}
        matrix = np.zeros((len(self.agents), len(self.agents)), dtype=np.int8)
        for turn in self.turns:
            for seen in turn.sees:
                matrix[index[seen], index[turn.agent]] = 1
        return matrix


class DependencyFunction(ABC):
    """Schedules the agents of one round. Subclass and implement :meth:`next_turn`."""

    def reset(self, agents: Sequence[str]) -> None:  # noqa: B027 (optional hook, not abstract)
        """Called at every env reset with the team's agents; check configuration here."""

    @abstractmethod
    def next_turn(self, state: RoundState) -> Turn | None:
        """The next turn of the round, or ``None`` when the round is over."""

    def validate(self, turn: Turn, state: RoundState) -> Turn:
        """Check a scheduled turn against the round; raise a clear error if it is impossible."""
        if not isinstance(turn, Turn):
            raise TypeError(
                f"{type(self).__name__}.next_turn must return a Turn or None, got {turn!r}."
            )
        if turn.agent not in state.agents:
            raise ValueError(
                f"{type(self).__name__} scheduled unknown agent {turn.agent!r}; "
                f"the team is {list(state.agents)}."
            )
        if turn.agent in state.acted:
            raise ValueError(
                f"{type(self).__name__} scheduled {turn.agent!r} twice in round {state.timestep}; "
                f"each agent acts at most once per round (acted so far: {list(state.acted)})."
            )
        not_yet = [a for a in turn.sees if a not in state.acted]
        if not_yet:
            raise ValueError(
                f"{type(self).__name__} lets {turn.agent!r} see {not_yet}, who have not acted yet in "
                f"round {state.timestep}; an agent can only depend on agents that acted before it "
                f"(acted so far: {list(state.acted)})."
            )
        return turn

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def check_members(owner: str, names: Iterable[str], agents: Sequence[str]) -> None:
    """Raise a ValueError naming ``owner`` when ``names`` holds agents that are not in the team."""
    unknown = [n for n in names if n not in agents]
    if unknown:
        raise ValueError(
            f"{owner} names agent(s) {unknown} that are not in the team {list(agents)}."
        )


class Chain(DependencyFunction):
    """Agents act in a fixed order; each sees its predecessors (the paper's experiments).

    Args:
        order: Acting order; defaults to the team's profile order.
        window: If set, each agent sees only its ``window`` immediate predecessors.
    """

    def __init__(self, order: Sequence[str] | None = None, *, window: int | None = None) -> None:
        if window is not None and window < 0:
            raise ValueError(f"Chain(window=...) must be >= 0 or None, got {window}.")
        self.order = tuple(order) if order is not None else None
        self.window = window

    def reset(self, agents: Sequence[str]) -> None:
        if self.order is not None:
            check_members("Chain(order=...)", self.order, agents)

    def next_turn(self, state: RoundState) -> Turn | None:
        order = self.order or state.agents
        i = len(state.actions)
        if i >= len(order):
            return None
        start = 0 if self.window is None else max(0, i - self.window)
        return Turn(order[i], sees=order[start:i])

    def __repr__(self) -> str:
        return f"Chain(order={self.order}, window={self.window})"


class Independent(DependencyFunction):
    """``D ≡ 0``: every agent acts once per round and sees no other agent (a DEC-POMDP)."""

    def __init__(self, order: Sequence[str] | None = None) -> None:
        self.order = tuple(order) if order is not None else None

    def reset(self, agents: Sequence[str]) -> None:
        if self.order is not None:
            check_members("Independent(order=...)", self.order, agents)

    def next_turn(self, state: RoundState) -> Turn | None:
        order = self.order or state.agents
        i = len(state.actions)
        return Turn(order[i]) if i < len(order) else None


class DAG(DependencyFunction):
    """A fixed dependency graph: each agent sees the agents listed as its parents.

    Agents act in a topological order of the graph (ties broken by profile order), so every agent
    acts after all of its parents.

    Args:
        parents: ``{agent: [agents whose actions it sees]}``; agents not listed have no parents.
        transitive: If True, an agent also sees its parents' ancestors.
    """

    def __init__(self, parents: Mapping[str, Iterable[str]], *, transitive: bool = False) -> None:
        self.parents = {agent: tuple(ps) for agent, ps in parents.items()}
        self.transitive = transitive
        self._order: tuple[str, ...] = ()
        self._sees: dict[str, tuple[str, ...]] = {}

    def reset(self, agents: Sequence[str]) -> None:
        check_members("DAG(parents=...)", self.parents, agents)
        for agent, ps in self.parents.items():
            check_members(f"DAG parents of {agent!r}", ps, agents)
        sorter = graphlib.TopologicalSorter({a: self.parents.get(a, ()) for a in agents})
        try:
            sorter.prepare()
        except graphlib.CycleError as exc:
            raise ValueError(
                f"DAG(parents=...) has a cycle {exc.args[1]}; a dependency graph must be acyclic."
            ) from None
        rank = {a: k for k, a in enumerate(agents)}
        order: list[str] = []
        while sorter.is_active():
            ready = sorted(sorter.get_ready(), key=rank.__getitem__)
            order.extend(ready)
            sorter.done(*ready)
        self._order = tuple(order)
        self._sees = {}
        for agent in self._order:
            seen = list(self.parents.get(agent, ()))
            if self.transitive:
                for parent in self.parents.get(agent, ()):
                    seen.extend(self._sees[parent])
            position = {a: k for k, a in enumerate(self._order)}
            self._sees[agent] = tuple(sorted(set(seen), key=position.__getitem__))

    def next_turn(self, state: RoundState) -> Turn | None:
        i = len(state.actions)
        if i >= len(self._order):
            return None
        agent = self._order[i]
        return Turn(agent, sees=self._sees[agent])

    def __repr__(self) -> str:
        return f"DAG(parents={self.parents}, transitive={self.transitive})"


class Router(DependencyFunction):
    """A dynamic schedule decided by a callable at every turn.

    ``choose(state)`` returns the next agent's name, a full :class:`Turn`, or ``None`` to end the
    round. When it returns a name, the agent sees the actions given by ``visibility``: ``"all"``
    (everyone who acted this round) or ``"last"`` (only the previous agent).

    Example — the first agent decides, by its output, who answers::

        def choose(state):
            if not state.actions:
                return "planner"
            if len(state.actions) == 1:
                return "coder" if "code" in state.action_of("planner") else "writer"
            return None
    """

    def __init__(
        self, choose: Callable[[RoundState], str | Turn | None], *, visibility: str = "all"
    ) -> None:
        if visibility not in ("all", "last"):
            raise ValueError(f"Router(visibility=...) must be 'all' or 'last', got {visibility!r}.")
        self.choose = choose
        self.visibility = visibility

    def next_turn(self, state: RoundState) -> Turn | None:
        choice = self.choose(state)
        if choice is None or isinstance(choice, Turn):
            return choice
        if not isinstance(choice, str):
            raise TypeError(
                f"Router's choose() must return an agent name, a Turn or None; got {choice!r}."
            )
        sees = state.acted if self.visibility == "all" else state.acted[-1:]
        return Turn(choice, sees=sees)

    def __repr__(self) -> str:
        return f"Router(choose={getattr(self.choose, '__name__', self.choose)!r}, visibility={self.visibility!r})"


class Orchestrator(DependencyFunction):
    """An orchestrator agent routes each round to the specialist its output names.

    The orchestrator acts first and sees nothing of this round. Its action is searched for the
    specialists' names (whole words, case-insensitive); the first one mentioned acts next and sees
    the orchestrator's action. If none is named, ``default`` acts (or the round goes straight to the
    ``finisher``/ends when ``default`` is None). An optional ``finisher`` acts last and sees everyone.

    Args:
        orchestrator: The routing agent.
        specialists: Agents the orchestrator can route to.
        finisher: Optional agent that acts after the specialist (e.g. an answer writer).
        default: Specialist used when the orchestrator names none.
    """

    def __init__(
        self,
        orchestrator: str,
        specialists: Sequence[str],
        *,
        finisher: str | None = None,
        default: str | None = None,
    ) -> None:
        if not specialists:
            raise ValueError("Orchestrator needs at least one specialist.")
        if default is not None and default not in specialists:
            raise ValueError(
                f"Orchestrator(default={default!r}) must be one of specialists {list(specialists)}."
            )
        self.orchestrator = orchestrator
        self.specialists = tuple(specialists)
        self.finisher = finisher
        self.default = default
        self._patterns = [
            (
                name,
                re.compile(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", re.IGNORECASE),
            )
            for name in self.specialists
        ]

    def reset(self, agents: Sequence[str]) -> None:
        members = [self.orchestrator, *self.specialists] + (
            [self.finisher] if self.finisher else []
        )
        check_members("Orchestrator", members, agents)

    def route(self, orchestrator_action: str) -> str | None:
        """The specialist named first in the orchestrator's action, else ``default``."""
        found = [
            (m.start(), name) for name, p in self._patterns if (m := p.search(orchestrator_action))
        ]
        return min(found)[1] if found else self.default

    def next_turn(self, state: RoundState) -> Turn | None:
        if not state.actions:
            return Turn(self.orchestrator)
        if len(state.actions) == 1:
            specialist = self.route(state.action_of(self.orchestrator))
            if specialist is not None:
                return Turn(specialist, sees=(self.orchestrator,))
        if self.finisher is not None and self.finisher not in state.acted:
            return Turn(self.finisher, sees=state.acted)
        return None

    def __repr__(self) -> str:
        return (
            f"Orchestrator(orchestrator={self.orchestrator!r}, specialists={self.specialists}, "
            f"finisher={self.finisher!r}, default={self.default!r})"
        )
