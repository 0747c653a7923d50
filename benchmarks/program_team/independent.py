"""The ``independent`` setting of the support desks (v1, v2): the same program, each agent paid
its own local reward at the episode's end instead of the team's.

Local rewards: the router, the right department (``routed``); the specialist that answered, the
team's success; the reviewer, a right verdict (``1 - false_approval - false_rejection``). The
team reward is still logged as ``team_reward``, so the run's curves compare with the team runs'.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from marft_envs.core.env import Transition
from marft_envs.programs import ProgramEnv

__all__ = ["independent_env"]


class IndependentDesk(ProgramEnv):
    """A desk env paying each agent its local reward; ``team`` is the desk's module."""

    def __init__(self, team: ModuleType, *args: Any, **kwargs: Any) -> None:
        self._team = team
        super().__init__(*args, **kwargs)

    def _final(self, event: Any) -> Transition:
        result = super()._final(event)
        parts = result.info.get("reward_parts")
        if not parts:
            return result
        calls = result.info.get("calls", {})
        local = {"router": parts["routed"]}
        for department in self._team.DEPARTMENTS:
            if calls.get(department):
                local[department] = parts["success"]
        if calls.get("reviewer"):
            local["reviewer"] = 1.0 - parts["false_approval"] - parts["false_rejection"]
        return Transition(
            local, result.terminated, result.info, team_reward=self._team.team_reward(parts)
        )


def independent_env(team: ModuleType, tasks: Any, test_tasks: Any) -> IndependentDesk:
    """The training env of ``team``'s desk (``team.desk``, its agents, weights and call limit)
    with local rewards; ``tasks`` and ``test_tasks`` as :class:`ProgramEnv` takes them."""
    return IndependentDesk(
        team,
        team.desk,
        team.AGENTS,
        tasks,
        test_tasks=test_tasks,
        reward_weights=team.WEIGHTS,
        max_calls=team.MAX_CALLS,
        credit="team",
    )
