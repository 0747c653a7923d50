"""Math problem solving by an LLM team (paper §5.1).

| | |
|---|---|
| Agents | from the profiles: ``actor`` (single), ``reasoner`` → ``actor`` (dual), ``reasoner`` → ``actor`` → ``verifier`` (trio) |
| Dependency | :class:`~marft_envs.core.dependency.Chain` by default (each agent sees its predecessors) |
| Observation | ``Problem: <text>``, plus, on retries, the team's previous answer and feedback |
| Action | any text; the graded agent's last ``\\boxed{}`` is its answer |
| Reward | 1 when every graded agent's answer is equivalent to the gold answer, else 0 (credit ``graded``) |
| Termination | when the answer is right, or when ``max_attempts`` attempts were used |
| Versions | v0: initial release (out of date: ``make`` builds v7 and warns; its grader dropped value-changing words after a number, e.g. ``5\text{ thousand}`` scored 1 for 5); v1: the grader keeps value words (multipliers, powers, negations) and compares chained relations, intervals and set-builder sets (out of date: ``make`` builds v7 and warns); v2: the grader refuses ``5_{1000}``, ``5\text{ ways times ways}``, digits after a repeating block and long decimals of irrationals, grades a box after 1,000,000 characters and matrices up to 100x100, and its time limit holds from threads (out of date: ``make`` builds v7 and warns); v3: a plain-number gold answer needs a number, not an unevaluated computation of it (``6 \times 8 - 9`` for 39 no longer scores; ``6 \times 8 - 9 = 39`` does; out of date: ``make`` builds v7 and warns); v4: an empty text block (``\text{}``, ``\text{ }``) no longer turns a computation into a text answer that escapes v3's rule (``\text{}6 \times 8 - 9`` for 39 no longer scores; out of date: ``make`` builds v7 and warns); v5: the env passes the problem text to the grader, which refuses an unevaluated computation of a plain-number gold only when it restates the problem (``2^{10}`` for 1024 in a counting problem, ``\binom{10}{3}``, ``5!`` score; ``6 \times 8 - 9`` for "Compute 6 \times 8 - 9." does not), reads ``(-3)/4``, ``-{5}``, ``1 000``, ``USD 5`` and ``five`` as numbers, and a gold ``3\frac12`` as 3.5; prompts and data unchanged (out of date: ``make`` builds v7 and warns); v6: the grader reads the edge forms of a number: ``½`` and the other vulgar fractions (``1½`` mixed), ``1'000``, ``5 (five)``, ``{1 \\over 2}``, ``{n \\choose k}`` and scientific notation with ``x``, ``*`` or a superscript exponent (``3.9 x 10^2``, ``3.9×10²``); prompts and data unchanged (out of date: ``make`` builds v7 and warns); v7: the grader reads more edge forms: ``1 000.5``, ``twenty-one``, ``1 1/2`` (a proper fraction after a whole number), ``Answer: 5``, ``Final answer: 42``, ``\\text{The answer is } 5`` and ``**5**``; prompts and data unchanged |

The problem comes from ``dataset`` — the built-in generator by default, or any source
:func:`marft_envs.math.data.load_dataset` accepts (a MATH or GSM8K JSONL file, a table, a list of
problems). ``reset(options={"index": i})`` pins problem ``i`` (evaluation walks a split in order).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from marft_envs.core.dependency import DependencyFunction
from marft_envs.core.env import FlexPOMDPEnv, Transition, pick_row
from marft_envs.core.profiles import AgentProfile, check_graded, named_team
from marft_envs.math.data import MATH_DATA, MathDataset, MathProblem, load_dataset
from marft_envs.math.grading import extract_answer, grade_answer
from marft_envs.math.profiles import DUAL_PROFILES, SINGLE_PROFILES, TRIO_PROFILES

__all__ = ["TEAMS", "MathEnv"]

#: Named teams, so registrations and command lines can say ``profiles="dual"``.
TEAMS: dict[str, tuple[AgentProfile, ...]] = {
    "single": SINGLE_PROFILES,
    "dual": DUAL_PROFILES,
    "trio": TRIO_PROFILES,
}


class MathEnv(FlexPOMDPEnv):
    """A team solves one math problem per episode; graded agents' answers are checked.

    Args:
        dataset: Problem source: a :class:`MathDataset`, a path, ``"builtin:train"``,
            ``"builtin:test"``, ``"hf:<name>"``, or a list of problems.
        profiles: The team: ``"single"``, ``"dual"``, ``"trio"`` (see :data:`TEAMS`) or profiles.
        dependency: Turn order and visibility (default: chain).
        max_attempts: Rounds the team gets; after a wrong answer it sees feedback and retries.
        grading_timeout: Seconds allowed for one symbolic comparison.
        dataset_kwargs: Extra arguments for :func:`load_dataset` (field names, split,
            ``on_invalid="skip"`` to drop unreadable rows of a real file, ...).
        **kwargs: Passed to :class:`FlexPOMDPEnv` (``credit``, ``render_mode``, ...).
    """

    metadata = {**FlexPOMDPEnv.metadata, "name": "math_v4"}
    #: How command lines name and load this family's problems (``--dataset``).
    data_family = MATH_DATA

    def __init__(
        self,
        dataset: Any = "builtin:train",
        profiles: str | Sequence[AgentProfile | Mapping[str, Any]] = "single",
        dependency: DependencyFunction | None = None,
        *,
        max_attempts: int = 1,
        grading_timeout: float = 2.0,
        dataset_kwargs: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        if not isinstance(max_attempts, int) or max_attempts < 1:
            raise ValueError(f"max_attempts must be a positive integer, got {max_attempts!r}.")
        if (
            isinstance(grading_timeout, bool)
            or not isinstance(grading_timeout, (int, float))
            or not 0 < grading_timeout < float("inf")
        ):
            raise ValueError(
                f"grading_timeout must be a positive, finite number of seconds, got "
                f"{grading_timeout!r}; the grader needs a time limit (default 2.0)."
            )
        kwargs.setdefault("horizon", max_attempts)
        super().__init__(named_team(profiles, TEAMS, "math"), dependency, **kwargs)
        check_graded(self.profiles, "math", "the paper's with_answer")
        self.dataset: MathDataset = load_dataset(dataset, **dict(dataset_kwargs or {}))
        if len(self.dataset) == 0:
            raise ValueError(f"The math dataset {dataset!r} is empty.")
        self.max_attempts = max_attempts
        self.grading_timeout = grading_timeout
        self.problem: MathProblem | None = None

    def _reset_task(self, options: Mapping[str, Any] | None) -> None:
        self.problem = pick_row(self.dataset, options, self.np_random)

    def _route_context(self) -> Mapping[str, Any]:
        assert self.problem is not None
        return {"level": self.problem.level, "subject": self.problem.subject}

    def _observation(self, agent: str) -> str:
        assert self.problem is not None
        text = f"Problem: {self.problem.problem}"
        for record in self.history:
            answer = record.info.get("answer_given")
            said = f"answered {answer}" if answer is not None else "gave no \\boxed{} answer"
            text += f"\n\nAttempt {record.timestep + 1}: the team {said}, which is incorrect."
        return text

    def _transition(self, actions: Mapping[str, str]) -> Transition:
        assert self.problem is not None
        graded = {
            a: grade_answer(
                actions[a],
                self.problem.answer,
                timeout=self.grading_timeout,
                problem=self.problem.problem,
            )
            for a in actions
            if self.profiles[a].graded
        }
        correct = bool(graded) and all(graded.values())
        answer_given = extract_answer(actions[list(graded)[-1]]) if graded else None
        attempts_used = self.timestep + 1
        return Transition(
            reward=float(correct),
            terminated=correct or attempts_used >= self.max_attempts,
            info={
                "correct": correct,
                "graded": graded,
                "answer_given": answer_given,
                "gold": self.problem.answer,
            },
        )
