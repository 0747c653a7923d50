"""Dispatch: an orchestrator routes each request to the right specialist.

| | |
|---|---|
| Agents | ``dispatcher``, ``calculator``, ``speller`` |
| Dependency | :class:`~marft_envs.core.dependency.Orchestrator`: the dispatcher acts first; the specialist it names acts next and sees its message |
| Observation | the request (a sum, or a word to reverse) |
| Action | any text |
| Reward | 1 when the right specialist was chosen and its text contains the answer, else 0 |
| Termination | after one round |
| Versions | v0: initial release |

The turn order changes with the dispatcher's output, so this env exercises dynamic dependency
functions: a specialist that was not routed to does not act in that round.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from marft_envs.core.dependency import DependencyFunction, Orchestrator
from marft_envs.core.env import FlexPOMDPEnv, Transition
from marft_envs.core.profiles import AgentProfile

__all__ = ["DispatchEnv"]

_WORDS = ("river", "planet", "garden", "marble", "violet", "copper", "lantern", "meadow")

DISPATCH_PROFILES = (
    AgentProfile(
        "dispatcher",
        "You route requests. Reply with the name of the specialist who should handle the request: "
        "calculator (sums) or speller (reversing words).",
    ),
    AgentProfile(
        "calculator", "You are the calculator. Answer the sum with a number.", graded=True
    ),
    AgentProfile("speller", "You are the speller. Write the requested word reversed.", graded=True),
)


class DispatchEnv(FlexPOMDPEnv):
    """Route a request to the calculator or the speller.

    Args:
        profiles: Custom team (defaults to dispatcher, calculator, speller).
        dependency: Defaults to ``Orchestrator("dispatcher", ["calculator", "speller"])``.
        **kwargs: Passed to :class:`FlexPOMDPEnv`.
    """

    metadata = {**FlexPOMDPEnv.metadata, "name": "dispatch_v0"}

    def __init__(
        self,
        profiles: list[AgentProfile | Mapping[str, Any]] | None = None,
        dependency: DependencyFunction | None = None,
        **kwargs: Any,
    ) -> None:
        dependency = dependency or Orchestrator("dispatcher", ["calculator", "speller"])
        super().__init__(profiles or DISPATCH_PROFILES, dependency, **kwargs)
        self.kind, self.request, self.answer = "", "", ""

    def _reset_task(self, options: Mapping[str, Any] | None) -> None:
        if self.np_random.random() < 0.5:
            a, b = (int(x) for x in self.np_random.integers(1, 100, size=2))
            self.kind, self.request, self.answer = "calculator", f"What is {a} + {b}?", str(a + b)
        else:
            word = _WORDS[int(self.np_random.integers(len(_WORDS)))]
            self.kind, self.request, self.answer = (
                "speller",
                f"Reverse the word '{word}'.",
                word[::-1],
            )

    def _route_context(self) -> Mapping[str, Any]:
        return {"request": self.request}

    def _observation(self, agent: str) -> str:
        return f"Request: {self.request}"

    def _transition(self, actions: Mapping[str, str]) -> Transition:
        routed = [a for a in actions if a != "dispatcher"]
        correct = routed == [self.kind] and self.answer in actions[self.kind]
        return Transition(
            reward=float(correct), terminated=True, info={"correct": correct, "routed_to": routed}
        )
