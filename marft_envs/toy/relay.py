"""Relay: a secret code must travel from the first agent to the last.

| | |
|---|---|
| Agents | ``scout`` → (``messenger_1`` … ) → ``reporter`` (``n_agents`` ≥ 2) |
| Dependency | :class:`~marft_envs.core.dependency.Chain` by default |
| Observation | the scout sees the code; everyone else only the instruction; v1: every agent also sees the round number and the round limit |
| Action | any text |
| Reward | 1 when the graded reporter's text contains the code, else 0 (credit rule ``graded``) |
| Termination | when the reporter is right; truncation after ``horizon`` rounds (default 1; > 1 gives retries with feedback) |
| Versions | v0: initial release; v1: the round index is in every observation (``show_round=True``) |

A failed episode ends by truncation at the round limit, where the return is cut short rather than
finished. Without the round index the critic cannot tell a first attempt from a last one, so its
values average over both and bias the advantages of every round; v1 shows it.

Only the messages the dependency function makes visible carry the code, so the team's success
measures whether ``D`` connects the scout to the reporter: with ``Independent()`` it never succeeds.
"""

from __future__ import annotations

import string
from collections.abc import Mapping
from typing import Any

from marft_envs.core.dependency import DependencyFunction
from marft_envs.core.env import FlexPOMDPEnv, Transition
from marft_envs.core.profiles import AgentProfile

__all__ = ["RelayEnv"]


def relay_profiles(n_agents: int) -> list[AgentProfile]:
    """Scout, ``n_agents - 2`` messengers, reporter."""
    if n_agents < 2:
        raise ValueError(f"RelayEnv needs n_agents >= 2 (a scout and a reporter), got {n_agents}.")
    team = [AgentProfile("scout", "You are the scout. Pass the secret code on, exactly.")]
    team += [
        AgentProfile(
            f"messenger_{k}", "You are a messenger. Repeat the code you received, exactly."
        )
        for k in range(1, n_agents - 1)
    ]
    team.append(
        AgentProfile("reporter", "You are the reporter. State the code you received.", graded=True)
    )
    return team


class RelayEnv(FlexPOMDPEnv):
    """Pass a random code along the team; the reporter must state it.

    Args:
        n_agents: Team size when ``profiles`` is not given.
        code_length: Characters in the code.
        profiles: Custom team (the first agent sees the code; graded agents are scored).
        dependency: Turn order and visibility (default: chain).
        show_round: Start every observation with "Round t of H." (relay-v1).
        **kwargs: Passed to :class:`FlexPOMDPEnv` (``horizon``, ``credit``, ``render_mode``, ...).
    """

    metadata = {**FlexPOMDPEnv.metadata, "name": "relay_v0"}

    def __init__(
        self,
        n_agents: int = 2,
        code_length: int = 4,
        profiles: list[AgentProfile | Mapping[str, Any]] | None = None,
        dependency: DependencyFunction | None = None,
        show_round: bool = False,
        **kwargs: Any,
    ) -> None:
        if code_length < 1:
            raise ValueError(f"code_length must be >= 1, got {code_length}.")
        self.code_length = code_length
        self.show_round = show_round
        super().__init__(profiles or relay_profiles(n_agents), dependency, **kwargs)
        self.code = ""

    def _reset_task(self, options: Mapping[str, Any] | None) -> None:
        alphabet = string.ascii_uppercase + string.digits
        self.code = "".join(
            alphabet[i] for i in self.np_random.integers(0, len(alphabet), self.code_length)
        )

    def _observation(self, agent: str) -> str:
        clock = f"Round {self.timestep + 1} of {self.horizon}. " if self.show_round else ""
        if agent == self.possible_agents[0]:
            return f"{clock}The secret code is {self.code}."
        feedback = ""
        if self.history:
            last = self.history[-1].info
            feedback = f" Last round the team was {'right' if last['correct'] else 'wrong'}."
        return f"{clock}What is the secret code?{feedback}"

    def _transition(self, actions: Mapping[str, str]) -> Transition:
        graded = [a for a in actions if self.profiles[a].graded]
        correct = bool(graded) and all(self.code in actions[a] for a in graded)
        return Transition(reward=float(correct), terminated=correct, info={"correct": correct})
