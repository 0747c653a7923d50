"""Math with a Python tool: agents may run expressions and read the results within the episode.

| | |
|---|---|
| Agents | ``actor`` (single: calls the tool and answers), ``caller`` → ``answerer`` (dual) |
| Dependency | single: one agent; dual: :class:`ToolRouter` — the answerer acts only in a round where the caller made no tool call (or has none left), and then sees the caller's message |
| Observation | ``Problem: <text>``, every earlier call with its output, and the calls left |
| Action | any text; ``<python>EXPR</python>`` calls the tool (first call of a text); a graded agent's ``\\boxed{}`` is its final answer |
| Reward | 1 when the final ``\\boxed{}`` answer is equivalent to the gold answer, else 0 (credit ``graded``); tool calls earn nothing themselves |
| Termination | when a graded agent answers with ``\\boxed{}``, or a round has neither an answer nor a call that can run; at most ``max_calls + 1`` rounds |
| Versions | v0: initial release (out of date: ``make`` builds v7 and warns); v1: graded by the math grader of math-*-v2 (out of date: ``make`` builds v7 and warns); v2: graded by the math grader of math-*-v3 (out of date: ``make`` builds v7 and warns); v3: graded by the math grader of math-*-v4 (see ``marft_envs/math/env.py``), and a call past its time limit names both limits (2 s of CPU time, 5 s in all) instead of "the 2-second limit" (out of date: ``make`` builds v7 and warns); v4: calls run in the sandbox of code-*-v2 (an expression that kills its own process reads "killed by signal 9 (SIGKILL)", not a time-out; kernel keys and user namespaces refused; no host path in the output; out of date: ``make`` builds v7 and warns); v5: graded by the math grader of math-*-v5, which is handed the problem text (see ``marft_envs/math/env.py``) (out of date: ``make`` builds v7 and warns); v6: graded by the math grader of math-*-v6, which reads the edge forms of a number (``½``, ``1'000``, ``5 (five)``, ``{1 \\over 2}``; out of date: ``make`` builds v7 and warns); v7: graded by the math grader of math-*-v7 (``1 000.5``, ``twenty-one``, ``1 1/2``, ``Answer: 5``, ``**5**``) |

A round in which a tool agent's text holds a call (and no ``\\boxed{}`` answer from a graded agent)
runs the expression in the code family's sandbox (:mod:`marft_envs.tools.calls`) and shows the
output in every agent's next observation; each call uses one of ``max_calls``. Malformed calls
(not a single expression, too long) and hostile ones (time, memory, files, processes) cost a call
and come back as ``Error: ...`` lines; the episode goes on.

Problems come from the math family (``dataset``, as :class:`~marft_envs.math.env.MathEnv`):
the built-in generator by default, any file :func:`marft_envs.math.data.load_dataset` reads
otherwise; ``marft train --dataset`` works as for the math envs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from typing import Any

from marft_envs.core.dependency import DependencyFunction, RoundState, Turn, check_members
from marft_envs.core.env import Transition
from marft_envs.core.profiles import AgentProfile, named_team
from marft_envs.math.env import MathEnv
from marft_envs.math.grading import extract_answer, grade_answer
from marft_envs.math.grading.extract import last_boxed
from marft_envs.sandbox.runner import Sandbox, SandboxResult
from marft_envs.tools.calls import (
    ToolResult,
    check_expression,
    check_sandbox_runs,
    find_tool_call,
    read_result,
    run_expression,
    submit_expression,
)
from marft_envs.tools.profiles import TOOL_TEAMS

__all__ = ["ToolMathEnv", "ToolRouter"]


class ToolRouter(DependencyFunction):
    """The caller acts every round; the answerer only when the caller made no runnable tool call.

    A round where the caller calls the tool ends after the caller (the output arrives in the next
    round's observation); a round where it writes notes instead, or has no calls left, goes on to
    the answerer, who sees the caller's message. Reads ``state.context["calls_left"]``.
    """

    def __init__(self, caller: str = "caller", answerer: str = "answerer") -> None:
        self.caller = caller
        self.answerer = answerer

    def reset(self, agents: Sequence[str]) -> None:
        check_members("ToolRouter", [self.caller, self.answerer], agents)

    def next_turn(self, state: RoundState) -> Turn | None:
        if not state.actions:
            return Turn(self.caller)
        if len(state.actions) == 1:
            calls_left = int(state.context.get("calls_left", 0))
            if calls_left <= 0 or find_tool_call(state.action_of(self.caller)) is None:
                return Turn(self.answerer, sees=(self.caller,))
        return None

    def __repr__(self) -> str:
        return f"ToolRouter(caller={self.caller!r}, answerer={self.answerer!r})"


class ToolMathEnv(MathEnv):
    """A math problem per episode; agents marked ``metadata["tools"]`` may call a Python tool.

    Args:
        dataset: Problem source, as for :class:`MathEnv` (default: the built-in generator).
        profiles: ``"single"``, ``"dual"`` or profiles (``metadata={"tools": True}`` for callers).
        dependency: Default: none for one agent, :class:`ToolRouter` for the dual team.
        max_calls: Tool calls per episode (the budget); the episode has at most ``max_calls + 1``
            rounds.
        sandbox: Where calls run (default: the shared :func:`~marft_envs.tools.calls.tool_sandbox`).
        **kwargs: Passed to :class:`MathEnv` (``grading_timeout``, ``dataset_kwargs``, ``credit``,
            ``render_mode``, ...).
    """

    metadata = {**MathEnv.metadata, "name": "tool_math_v3"}

    def __init__(
        self,
        dataset: Any = "builtin:train",
        profiles: str | Sequence[AgentProfile | Mapping[str, Any]] = "single",
        dependency: DependencyFunction | None = None,
        *,
        max_calls: int = 3,
        sandbox: Sandbox | None = None,
        **kwargs: Any,
    ) -> None:
        if isinstance(max_calls, bool) or not isinstance(max_calls, int) or max_calls < 0:
            raise ValueError(f"max_calls must be a non-negative integer, got {max_calls!r}.")
        if sandbox is not None and not isinstance(sandbox, Sandbox):
            raise TypeError(
                f"sandbox must be a marft_envs.sandbox.Sandbox, got {type(sandbox).__name__}."
            )
        team = named_team(profiles, TOOL_TEAMS, "tool-math")
        if dependency is None and profiles == "dual":
            dependency = ToolRouter()
        check_sandbox_runs(sandbox)
        kwargs.setdefault("horizon", max_calls + 1)
        super().__init__(dataset, team, dependency, **kwargs)
        self.max_calls = max_calls
        self.sandbox = sandbox
        self.calls: list[tuple[str, ToolResult]] = []
        self._pending: dict[str, Future[SandboxResult]] = {}

    @property
    def calls_left(self) -> int:
        return self.max_calls - len(self.calls)

    def _reset_task(self, options: Mapping[str, Any] | None) -> None:
        super()._reset_task(options)
        self.calls = []
        self._pending.clear()

    def _route_context(self) -> Mapping[str, Any]:
        return {**super()._route_context(), "calls_left": self.calls_left}

    def _observation(self, agent: str) -> str:
        assert self.problem is not None
        text = f"Problem: {self.problem.problem}"
        for k, (expression, result) in enumerate(self.calls, 1):
            text += f"\n\nCall {k}: <python>{expression}</python>\nOutput: {result.output}"
        if self.calls_left > 0:
            text += f"\n\nTool calls left: {self.calls_left}."
        else:
            text += "\n\nNo tool calls left: give the final answer in \\boxed{}."
        return text

    def _tool_call(self, actions: Mapping[str, str]) -> str | None:
        """The call this round makes: the first one in a tool agent's text, if any are left."""
        if self.calls_left <= 0:
            return None
        for agent, action in actions.items():
            if self.profiles[agent].metadata.get("tools"):
                expression = find_tool_call(action)
                if expression is not None:
                    return expression
        return None

    def prepare_step(self, action: str) -> None:
        """Start the call in ``action`` now, so a batched collector runs every copy's call at once."""
        agent = self.agent_selection
        if not self.agents or not isinstance(action, str):
            return
        profile = self.profiles[agent]
        if not profile.metadata.get("tools") or self.calls_left <= 0:
            return
        action = action[: self.max_action_length]
        if profile.graded and last_boxed(action) is not None:
            return
        expression = find_tool_call(action)
        if expression is None or expression in self._pending or check_expression(expression):
            return
        try:
            self._pending[expression] = submit_expression(expression, self.sandbox)
        except OSError:
            return  # run_expression reports it in the transition

    def _run(self, expression: str) -> ToolResult:
        future = self._pending.pop(expression, None)
        if future is not None:
            return read_result(future.result())
        return run_expression(expression, self.sandbox)

    def _transition(self, actions: Mapping[str, str]) -> Transition:
        assert self.problem is not None
        answers = {
            a: actions[a] for a in actions if self.profiles[a].graded and last_boxed(actions[a])
        }
        expression = None if answers else self._tool_call(actions)
        if expression is not None:
            result = self._run(expression)
            self.calls.append((expression, result))
            self._pending.clear()
            return Transition(
                reward=0.0,
                terminated=False,
                info={"correct": False, "tool_calls": len(self.calls), "tool_ok": result.ok},
            )
        self._pending.clear()
        graded = {
            a: bool(a in answers)
            and grade_answer(
                answers[a],
                self.problem.answer,
                timeout=self.grading_timeout,
                problem=self.problem.problem,
            )
            for a in actions
            if self.profiles[a].graded
        }
        correct = bool(graded) and all(graded.values())
        last = list(answers.values())[-1] if answers else None
        return Transition(
            reward=float(correct),
            terminated=True,
            info={
                "correct": correct,
                "graded": graded,
                "answer_given": extract_answer(last) if last is not None else None,
                "gold": self.problem.answer,
                "tool_calls": len(self.calls),
            },
        )
