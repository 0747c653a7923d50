"""Programming by an LLM team, graded by hidden unit tests run in a sandbox.

| | |
|---|---|
| Agents | from the profiles: ``coder`` (single), ``tester`` → ``coder`` (dual) |
| Dependency | :class:`~marft_envs.core.dependency.Chain` by default (the coder sees the tester's cases) |
| Observation | ``Task: <text>`` (MBPP and generated tasks show one test as an example, HumanEval the signature and docstring), plus, on retries, the previous program and how it failed |
| Action | any text; the graded agent's last fenced ```` ```python ```` block is its program |
| Reward | 1 when every hidden test passes, else 0 (``partial_credit=True``: the share passed); credit ``graded`` |
| Termination | when every test passes, or when ``max_attempts`` attempts were used |
| Versions | v0: initial release (retired: a program could earn reward by shadowing a builtin the tests call or reading the hidden tests from disk); v1: the tests see the real builtins, the program sees only the interpreter's files, failure details are one printable line of at most 300 characters; prompts and data unchanged (out of date: ``make`` builds v2 and warns); v2: a program that kills its own process is told "killed by signal 9 (SIGKILL)", not "used up its CPU time"; the sandbox refuses kernel keys, new user namespaces and, without a memory cgroup, SysV shared memory and memfd files; no host path in failure details |

Infos after a round: ``correct``, ``tests_passed``, ``tests_total``, ``failure`` (``no_code``,
``syntax_error``, ``timeout``, ``memory``, ``wrong_answer``, ``runtime_error``, ``exited``, ...),
``failure_detail`` and ``problem_id``. Programs run in a :class:`~marft_envs.sandbox.runner.Sandbox`
(the process-wide default unless one is passed); env copies share its worker pool, and a batched
collector that calls :meth:`CodeEnv.prepare_step` first gets every copy's program running at once.
A text without a fenced Python block scores 0 without starting a process.

The problem comes from ``dataset`` — the built-in generator by default, or any source
:func:`marft_envs.code.data.load_dataset` accepts (MBPP JSON/JSONL, HumanEval JSONL, a list of
problems). ``reset(options={"index": i})`` pins problem ``i`` (evaluation walks a split in order).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from typing import Any

from marft_envs.code.data import CODE_DATA, CodeDataset, CodeProblem, load_dataset
from marft_envs.code.grading import Grade, extract_program, grade_result, no_code_grade
from marft_envs.code.profiles import DUAL_PROFILES, SINGLE_PROFILES
from marft_envs.core.dependency import DependencyFunction
from marft_envs.core.env import FlexPOMDPEnv, Transition, pick_row
from marft_envs.core.profiles import AgentProfile, check_graded, named_team
from marft_envs.sandbox.runner import Sandbox, SandboxLimits, SandboxResult, default_sandbox

__all__ = ["TEAMS", "CodeEnv"]

#: Named teams, so registrations and command lines can say ``profiles="dual"``.
TEAMS: dict[str, tuple[AgentProfile, ...]] = {"single": SINGLE_PROFILES, "dual": DUAL_PROFILES}

_SHOWN_PROGRAM_CHARS = 4000


def _sandbox_limits(limits: Any) -> SandboxLimits | None:
    """``limits`` as :class:`SandboxLimits`: a mapping (``--env-kwargs`` JSON) names fields."""
    if limits is None or isinstance(limits, SandboxLimits):
        return limits
    fields = [f.name for f in dataclasses.fields(SandboxLimits)]
    if not isinstance(limits, Mapping):
        raise TypeError(
            f"limits must be a SandboxLimits or a mapping of its fields {fields}, got "
            f"{type(limits).__name__}."
        )
    unknown = sorted(set(limits) - set(fields))
    if unknown:
        raise ValueError(
            f"limits {dict(limits)!r}: unknown field(s) {unknown}; SandboxLimits has {fields}."
        )
    return dataclasses.replace(SandboxLimits(), **limits)


class CodeEnv(FlexPOMDPEnv):
    """A team writes one program per attempt; the graded agents' programs must pass hidden tests.

    Args:
        dataset: Problem source: a :class:`CodeDataset`, a path, ``"builtin:train"``,
            ``"builtin:test"``, or a list of problems.
        profiles: The team: ``"single"``, ``"dual"`` (see :data:`TEAMS`) or profiles.
        dependency: Turn order and visibility (default: chain).
        max_attempts: Rounds the team gets; after a failed attempt it sees the program and why it
            failed, and tries again.
        partial_credit: Reward the share of tests passed instead of all-or-nothing.
        sandbox: Where programs run (default: the process-wide :func:`default_sandbox`).
        limits: Resource limits (a :class:`SandboxLimits`, or a mapping of some of its fields, as
            ``--env-kwargs`` JSON gives); given without ``sandbox``, a sandbox with these limits
            is made.
        dataset_kwargs: Extra arguments for :func:`load_dataset` (``validate``, ``on_invalid``,
            ``size``, ...).
        **kwargs: Passed to :class:`FlexPOMDPEnv` (``credit``, ``render_mode``, ...).
    """

    metadata = {**FlexPOMDPEnv.metadata, "name": "code_v1"}
    #: How command lines name and load this family's problems (``--dataset``).
    data_family = CODE_DATA

    def __init__(
        self,
        dataset: Any = "builtin:train",
        profiles: str | Sequence[AgentProfile | Mapping[str, Any]] = "single",
        dependency: DependencyFunction | None = None,
        *,
        max_attempts: int = 1,
        partial_credit: bool = False,
        sandbox: Sandbox | None = None,
        limits: SandboxLimits | Mapping[str, Any] | None = None,
        dataset_kwargs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if not isinstance(max_attempts, int) or max_attempts < 1:
            raise ValueError(f"max_attempts must be a positive integer, got {max_attempts!r}.")
        if sandbox is not None and not isinstance(sandbox, Sandbox):
            raise TypeError(
                f"sandbox must be a marft_envs.sandbox.Sandbox, got {type(sandbox).__name__}."
            )
        limits = _sandbox_limits(limits)
        kwargs.setdefault("horizon", max_attempts)
        super().__init__(named_team(profiles, TEAMS, "code"), dependency, **kwargs)
        check_graded(self.profiles, "code", "whose program is run")
        self.dataset: CodeDataset = load_dataset(
            dataset, limits=limits, **dict(dataset_kwargs or {})
        )
        if len(self.dataset) == 0:
            raise ValueError(f"The code dataset {dataset!r} is empty.")
        self.max_attempts = max_attempts
        self.partial_credit = bool(partial_credit)
        self._sandbox = sandbox
        self._limits = limits
        self.problem: CodeProblem | None = None
        self._pending: dict[tuple[str, str], Future[SandboxResult]] = {}

    @property
    def sandbox(self) -> Sandbox:
        """The sandbox programs run in (created on first use)."""
        if self._sandbox is None:
            self._sandbox = default_sandbox() if self._limits is None else Sandbox(self._limits)
        return self._sandbox

    def prepare_step(self, action: str) -> None:
        """Start running ``action``'s program now if the agent about to step is graded.

        Batched collectors call this on every env copy before stepping them, so the copies'
        programs run in parallel on the sandbox's worker pool; ``step`` then collects the result.
        """
        agent = self.agent_selection
        if not self.agents or not self.profiles[agent].graded or self.problem is None:
            return
        if not isinstance(action, str):
            return
        action = action[: self.max_action_length]
        code = extract_program(action)
        if code is not None and (agent, action) not in self._pending:
            self._pending[(agent, action)] = self.sandbox.submit(
                self.problem.program(code), self.problem.unit_tests
            )

    def _grade(self, agent: str, action: str) -> Grade:
        assert self.problem is not None
        code = extract_program(action)
        if code is None:
            return no_code_grade(self.problem)
        future = self._pending.pop((agent, action), None)
        result = (
            future.result()
            if future is not None
            else self.sandbox.run(self.problem.program(code), self.problem.unit_tests)
        )
        return grade_result(result, partial_credit=self.partial_credit)

    def _reset_task(self, options: Mapping[str, Any] | None) -> None:
        self._pending.clear()
        self.problem = pick_row(self.dataset, options, self.np_random)

    def _route_context(self) -> Mapping[str, Any]:
        assert self.problem is not None
        return {"problem_id": self.problem.id, "entry_point": self.problem.entry_point}

    def _observation(self, agent: str) -> str:
        assert self.problem is not None
        text = f"Task: {self.problem.prompt}"
        for record in self.history:
            info = record.info
            program = info.get("program")
            if program is None:
                text += f"\n\nAttempt {record.timestep + 1}: the team gave no ```python block."
                continue
            shown = (
                program
                if len(program) <= _SHOWN_PROGRAM_CHARS
                else program[:_SHOWN_PROGRAM_CHARS] + "\n# ... (cut)"
            )
            text += (
                f"\n\nAttempt {record.timestep + 1}:\n```python\n{shown.rstrip()}\n```\n"
                f"It passed {info['tests_passed']} of {info['tests_total']} tests; the first failure: "
                f"{info['failure']}"
                + (f" ({info['failure_detail']})" if info.get("failure_detail") else "")
                + "."
            )
        return text

    def _transition(self, actions: Mapping[str, str]) -> Transition:
        assert self.problem is not None
        grades = {a: self._grade(a, actions[a]) for a in actions if self.profiles[a].graded}
        self._pending.clear()
        correct = bool(grades) and all(g.correct for g in grades.values())
        last_agent = list(grades)[-1] if grades else None
        last = grades[last_agent] if last_agent else no_code_grade(self.problem)
        if self.partial_credit:
            reward = sum(g.reward for g in grades.values()) / len(grades) if grades else 0.0
        else:
            reward = float(correct)
        attempts_used = self.timestep + 1
        return Transition(
            reward=reward,
            terminated=correct or attempts_used >= self.max_attempts,
            info={
                "correct": correct,
                "graded": {a: g.correct for a, g in grades.items()},
                "tests_passed": last.passed,
                "tests_total": last.total,
                "failure": last.failure,
                "failure_detail": last.detail,
                "problem_id": self.problem.id,
                "program": extract_program(actions[last_agent]) if last_agent else None,
            },
        )
