"""Choice team: a planner picks one of three operations; only the right one lets the solver win.

| | |
|---|---|
| Agents | ``planner`` (the chooser) → ``solver`` (graded) |
| Dependency | :class:`~marft_envs.core.dependency.Chain` with ``window=0``: the planner acts first, the solver second; neither reads the other's message, the planner's choice reaches the solver through the env |
| Observation | planner: the request, ``Problem: Use Times. Compute 7 ? 3.``; solver: the problem the planner's choice made, with the tail, ``Problem: Compute 7 \\times 3 + 4.`` (a ``?`` stays when the planner wrote no operation) |
| Action | any text; the planner's first operation symbol (``+``, ``-``, ``\\times``; ``*`` reads as ``\\times``) is its choice, the solver's last ``\\boxed{}`` its answer |
| Reward | 1 when the solver's answer equals the request's value with the named operation, else 0 (credit ``team``: both agents receive it); ``info["reward_parts"]``: ``success`` and ``right_choice`` (weight 0, logged as ``rollout/reward/right_choice``) |
| Termination | after one round |
| Versions | v0: initial release (out of date: ``make`` builds v1 and warns); v1: graded by the math grader of math-*-v7 (``1 000.5``, ``twenty-one``, ``1 1/2``, ``Answer: 5``, ``**5**``); tasks and prompts unchanged |

The three operations give three different values (:mod:`marft_envs.choice.tasks`), so after a
wrong choice the solver can only score by an arithmetic slip: the planner's choice decides whether
the team can succeed, and the solver's sampling noise decides whether it does. That is the setting
where a team reward teaches the chooser badly and branching at its turn
(``--branch planner=3x4``) compares its choices from the same state (docs/training.md).

The prompts are the built-in math teams' (the dual reasoner's and the single actor's), so the
built-in model ``marft-tiny-math`` reads both agents' observations in the format it was trained on.
Tasks are generated from ``self.np_random``; ``split="train"`` (default) and ``split="test"`` never
share a request (a hash of its text decides, :mod:`marft_envs.core.splits`). Infos after the round:
``correct``, ``graded``, ``choice`` (the option read, or None), ``operation`` (the right one),
``gold``, ``answer_given`` and ``reward_parts``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from marft_envs.choice.tasks import ChoiceTask, draw_task, parse_choice, solver_problem
from marft_envs.core.dependency import Chain, DependencyFunction
from marft_envs.core.env import FlexPOMDPEnv, Transition
from marft_envs.core.profiles import AgentProfile
from marft_envs.core.splits import check_split, draw_in_split
from marft_envs.math.grading import extract_answer, grade_answer
from marft_envs.math.profiles import DUAL_PROFILES, SINGLE_PROFILES

__all__ = ["CHOICE_PROFILES", "ChoiceEnv"]

#: The planner with the dual reasoner's prompt, the solver with the single actor's.
CHOICE_PROFILES = (
    AgentProfile("planner", DUAL_PROFILES[0].system_prompt),
    AgentProfile("solver", SINGLE_PROFILES[0].system_prompt, graded=True),
)


class ChoiceEnv(FlexPOMDPEnv):
    """A planner chooses the operation of a request; the solver computes the problem it made.

    Args:
        profiles: The team: a chooser first, then a graded solver (default :data:`CHOICE_PROFILES`).
        dependency: Turn order and visibility (default: ``Chain(window=0)``).
        split: ``"train"`` or ``"test"`` (held out; disjoint from train by construction).
        tail_length: Additions or subtractions after ``a ? b`` (the solver's share of the work).
        grading_timeout: Seconds allowed for one comparison of the solver's answer.
        **kwargs: Passed to :class:`FlexPOMDPEnv` (``credit``, ``render_mode``, ...).
    """

    metadata = {**FlexPOMDPEnv.metadata, "name": "choice_team_v0"}

    def __init__(
        self,
        profiles: Sequence[AgentProfile | Mapping[str, Any]] | None = None,
        dependency: DependencyFunction | None = None,
        *,
        split: str = "train",
        tail_length: int = 1,
        grading_timeout: float = 2.0,
        **kwargs: Any,
    ) -> None:
        if not isinstance(tail_length, int) or isinstance(tail_length, bool) or tail_length < 0:
            raise ValueError(f"tail_length must be an integer >= 0, got {tail_length!r}.")
        kwargs.setdefault("credit", "team")
        super().__init__(profiles or CHOICE_PROFILES, dependency or Chain(window=0), **kwargs)
        if len(self.possible_agents) != 2 or not self.profiles[self.possible_agents[1]].graded:
            raise ValueError(
                f"A choice team is a chooser then a graded solver (two profiles, the second "
                f"graded=True), got {list(self.possible_agents)}."
            )
        self.chooser, self.solver = self.possible_agents
        self.split = check_split(split, "choice-team")
        self.tail_length = tail_length
        self.grading_timeout = grading_timeout
        self.task: ChoiceTask | None = None

    def _reset_task(self, options: Mapping[str, Any] | None) -> None:
        self.task = draw_in_split(
            lambda rng: draw_task(rng, self.tail_length),
            lambda t: t.key,
            self.split,
            self.np_random,
        )

    def _route_context(self) -> Mapping[str, Any]:
        assert self.task is not None
        return {"operation": self.task.operation}

    def _choice(self) -> str | None:
        """The option the chooser's action of this round chose (None: not acted, or no symbol)."""
        text = dict(self.round_state.actions).get(self.chooser)
        return None if text is None else parse_choice(text)

    def _observation(self, agent: str) -> str:
        assert self.task is not None
        if agent == self.chooser:
            return f"Problem: {self.task.request}"
        return f"Problem: {solver_problem(self.task, self._choice())}"

    def _transition(self, actions: Mapping[str, str]) -> Transition:
        assert self.task is not None
        choice = parse_choice(actions.get(self.chooser, ""))
        problem = solver_problem(self.task, choice)
        gold = str(self.task.answer)
        answer = actions.get(self.solver, "")
        correct = grade_answer(answer, gold, timeout=self.grading_timeout, problem=problem)
        right = choice == self.task.operation
        return Transition(
            reward=float(correct),
            terminated=True,
            info={
                "correct": correct,
                "graded": {self.solver: correct},
                "choice": choice,
                "operation": self.task.operation,
                "gold": gold,
                "answer_given": extract_answer(answer),
                "reward_parts": {"success": float(correct), "right_choice": float(right)},
            },
        )
