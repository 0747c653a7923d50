"""Debate: two solvers answer a math problem; a judge decides who is right, or asks for rebuttals.

| | |
|---|---|
| Agents | ``solver_a``, ``solver_b``, ``judge`` (graded) |
| Dependency | :class:`JudgeSchedule` (dynamic): the solvers the judge's last verdict names (both in round 1) answer without seeing each other's answer of the round; then the judge, seeing theirs |
| Observation | ``Problem: <text>``; from round 2 on, the debate so far (every answer and verdict); the judge is told the round and the verdict format |
| Action | any text; a solver's last ``\\boxed{}`` is its answer; the judge's last ``Verdict:`` line is its verdict (:mod:`marft_envs.debate.verdict`) |
| Reward | the team reward: 1 when the verdict picks a solver whose latest answer is equivalent to the gold answer, else 0; credit ``team`` (v1: every agent that acted in the debate; v0: every agent that acted in the final round) |
| Termination | when the judge picks a solver, gives no readable verdict, or asks for a rebuttal in the last of ``max_rounds`` rounds (these two score 0) |
| Versions | v0: initial release (out of date: ``make`` builds v7 and warns; ``credit_scope="round"`` keeps its credit); v1: a solver idle in the final round (after ``rebut B``) shares the team reward too (``credit_scope="episode"``; out of date: ``make`` builds v7 and warns); v2: graded by the math grader of math-*-v2 (out of date: ``make`` builds v7 and warns); v3: graded by the math grader of math-*-v3 (out of date: ``make`` builds v7 and warns); v4: graded by the math grader of math-*-v4 (see ``marft_envs/math/env.py``; out of date: ``make`` builds v7 and warns); v5: graded by the math grader of math-*-v5, which is handed the problem text (out of date: ``make`` builds v7 and warns); v6: graded by the math grader of math-*-v6, which reads the edge forms of a number (``½``, ``1'000``, ``5 (five)``, ``{1 \\over 2}``; out of date: ``make`` builds v7 and warns); v7: graded by the math grader of math-*-v7 (``1 000.5``, ``twenty-one``, ``1 1/2``, ``Answer: 5``, ``**5**``) |

The judge's verdict is the dependency function's input: ``Verdict: rebut A`` makes the next round
hold solver A and the judge only, ``rebut both`` both solvers, ``Verdict: B`` ends the debate with
B's answer. :class:`JudgeSchedule` reads the verdict from ``state.context["verdict"]``; see
``docs/tutorial_debate.md`` for how it is written.

Problems come from the math family (``dataset``, as :class:`~marft_envs.math.env.MathEnv`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from marft_envs.core.dependency import DependencyFunction, RoundState, Turn, check_members
from marft_envs.core.env import Transition
from marft_envs.core.profiles import AgentProfile, named_team
from marft_envs.debate.profiles import DEBATE_TEAMS
from marft_envs.debate.verdict import Verdict, parse_verdict
from marft_envs.math.env import MathEnv
from marft_envs.math.grading import extract_answer, grade_answer

__all__ = ["DebateEnv", "JudgeSchedule"]

_SHOWN_CHARS = 1500


class JudgeSchedule(DependencyFunction):
    """Who speaks in a debate round, decided by the judge's last verdict.

    Round 1: every solver, then the judge. Later rounds: only the solvers the verdict asked for a
    rebuttal, then the judge. Solvers never see each other's answer of the same round (they answer
    independently; earlier rounds are in their observation); the judge sees the round's speakers.

    Args:
        solvers: The solvers, in the order the verdict's letters name them (A, B, ...).
        judge: The agent whose verdict routes the debate.
    """

    def __init__(self, solvers: Sequence[str] = ("solver_a", "solver_b"), judge: str = "judge"):
        if len(solvers) < 2:
            raise ValueError(f"A debate needs at least two solvers, got {list(solvers)}.")
        self.solvers = tuple(solvers)
        self.judge = judge

    def reset(self, agents: Sequence[str]) -> None:
        check_members("JudgeSchedule", [*self.solvers, self.judge], agents)

    def speakers(self, verdict: Verdict | None) -> tuple[str, ...]:
        """The solvers who speak in the round after ``verdict`` (all of them in the first round)."""
        return verdict.rebut if verdict is not None and verdict.rebut else self.solvers

    def next_turn(self, state: RoundState) -> Turn | None:
        speakers = self.speakers(state.context.get("verdict"))
        for solver in speakers:
            if solver not in state.acted:
                return Turn(solver)
        if self.judge not in state.acted:
            return Turn(self.judge, sees=speakers)
        return None

    def __repr__(self) -> str:
        return f"JudgeSchedule(solvers={self.solvers}, judge={self.judge!r})"


class DebateEnv(MathEnv):
    """A debate on one math problem per episode; the judge's verdict gives the team's answer.

    Args:
        dataset: Problem source, as for :class:`MathEnv` (default: the built-in generator).
        profiles: ``"debate"`` (two solvers and a judge) or profiles; the graded profile is the
            judge, the others are the solvers in order.
        dependency: Default: :class:`JudgeSchedule` over those solvers and judge.
        max_rounds: Rounds at most (the first answers, then up to ``max_rounds - 1`` rebuttals).
        **kwargs: Passed to :class:`MathEnv` (``grading_timeout``, ``dataset_kwargs``,
            ``credit``, ``render_mode``, ...).
    """

    metadata = {**MathEnv.metadata, "name": "debate_v4"}

    def __init__(
        self,
        dataset: Any = "builtin:train",
        profiles: str | Sequence[AgentProfile | Mapping[str, Any]] = "debate",
        dependency: DependencyFunction | None = None,
        *,
        max_rounds: int = 3,
        **kwargs: Any,
    ) -> None:
        if isinstance(max_rounds, bool) or not isinstance(max_rounds, int) or max_rounds < 1:
            raise ValueError(f"max_rounds must be a positive integer, got {max_rounds!r}.")
        team = [
            p if isinstance(p, AgentProfile) else AgentProfile.from_dict(p)
            for p in named_team(profiles, DEBATE_TEAMS, "debate")
        ]
        judges = [p.role for p in team if p.graded]
        if len(judges) != 1:
            raise ValueError(
                f"A debate team needs exactly one graded agent, the judge; got {judges or 'none'} "
                f"in {[p.role for p in team]}."
            )
        self.judge = judges[0]
        self.solvers = tuple(p.role for p in team if not p.graded)
        if dependency is None:
            dependency = JudgeSchedule(self.solvers, self.judge)
        kwargs.setdefault("horizon", max_rounds)
        kwargs.setdefault("credit", "team")
        super().__init__(dataset, team, dependency, **kwargs)
        self.max_rounds = max_rounds
        self.verdict: Verdict | None = None
        self.latest: dict[str, str] = {}

    def _reset_task(self, options: Mapping[str, Any] | None) -> None:
        super()._reset_task(options)
        self.verdict = None
        self.latest = {}

    def _route_context(self) -> Mapping[str, Any]:
        return {**super()._route_context(), "verdict": self.verdict}

    def _letter(self, solver: str) -> str:
        return "ABCDEFGHIJKLMNOPQRSTUVWXYZ"[self.solvers.index(solver)]

    def _observation(self, agent: str) -> str:
        assert self.problem is not None
        text = f"Problem: {self.problem.problem}"
        if self.history:
            text += "\n\nThe debate so far:"
            for record in self.history:
                text += f"\n\nRound {record.timestep + 1}"
                for role, action in record.actions:
                    shown = (
                        action if len(action) <= _SHOWN_CHARS else action[:_SHOWN_CHARS] + " ..."
                    )
                    name = f"Solver {self._letter(role)}" if role in self.solvers else "Judge"
                    text += f"\n[{name}] {shown}"
        round_no = self.timestep + 1
        if agent == self.judge:
            letters = " or ".join(self._letter(s) for s in self.solvers)
            text += f"\n\nYou judge round {round_no} of {self.max_rounds}."
            if round_no == self.max_rounds:
                text += f" This is the last round: your verdict must pick a solver ({letters})."
        elif round_no > 1:
            text += (
                f"\n\nThe judge asks you, Solver {self._letter(agent)}, for a rebuttal: defend or "
                "correct your answer and end with it in \\boxed{}."
            )
        return text

    def _format_visible(self, agent: str, visible: Sequence[tuple[str, str]]) -> str:
        return "\n\n".join(
            f"[Solver {self._letter(role)}]\n{action}" if role in self.solvers else action
            for role, action in visible
        )

    def _transition(self, actions: Mapping[str, str]) -> Transition:
        assert self.problem is not None
        for solver in self.solvers:
            if solver in actions:
                self.latest[solver] = actions[solver]
        verdict = parse_verdict(actions.get(self.judge, ""), self.solvers)
        last_round = self.timestep + 1 >= self.max_rounds
        info: dict[str, Any] = {
            "verdict": str(verdict) if verdict is not None else None,
            "gold": self.problem.answer,
            "rounds": self.timestep + 1,
        }
        if verdict is not None and verdict.rebut and not last_round:
            self.verdict = verdict
            return Transition(reward=0.0, terminated=False, info={**info, "correct": False})
        final = self.latest.get(verdict.pick, "") if verdict is not None and verdict.pick else None
        correct = final is not None and grade_answer(
            final, self.problem.answer, timeout=self.grading_timeout, problem=self.problem.problem
        )
        failure = None
        if verdict is None:
            failure = "no_verdict"
        elif verdict.rebut:
            failure = "rebuttal_after_last_round"
        return Transition(
            reward=float(correct),
            terminated=True,
            info={
                **info,
                "correct": correct,
                "graded": {self.judge: correct},
                "answer_given": extract_answer(final) if final else None,
                "failure": failure,
            },
        )
