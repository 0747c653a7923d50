"""math-*-v5: a computation is refused only when it restates the problem, and right answers
that v4 refused (issue 36, items 10 and 11) are paid, in unit cases and over full episodes of
every env that grades with this grader (math, tool-math, debate)."""

from __future__ import annotations

import pytest

import marft_envs
from marft_envs.math.data import MathProblem, load_dataset
from marft_envs.math.generator import generate_problems
from marft_envs.math.grading import check_gold, grade_answer, normalize_answer, parse_answer
from marft_envs.math.grading.compare import is_number_literal, restates_problem


def _response(answer: str, boxed: bool) -> str:
    return f"The answer is $\\boxed{{{answer}}}$." if boxed else answer


# -- right answers that restate nothing are paid when the problem is known ---------------------

SUBSETS = "How many subsets does a set with 10 elements have?"
COMMITTEE = "In how many ways can a committee of 3 be chosen from 10 people?"
QUEUE = "In how many ways can 5 people stand in a queue?"
TRIANGLE = "A right triangle has legs 3 and 4. How long is its hypotenuse $AB$?"
RIGHT_WITH_PROBLEM = [  # (answer, gold, problem): unevaluated forms (issue 36, item 11)
    ("2^{10}", "1024", SUBSETS),
    ("\\binom{10}{3}", "120", COMMITTEE),
    ("5!", "120", QUEUE),
    ("10^6", "1{,}000{,}000", "How many 6-digit strings of decimal digits are there?"),
    ("\\frac{2^{10}}{3}", "\\frac{1024}{3}", "What is the mean of 0, 1024 and 0?"),
    ("\\frac{\\frac{1}{2}}{\\frac{3}{4}}", "\\frac{2}{3}", "What fraction of 3/4 is 1/2?"),
    ("AB = \\sqrt{3^2+4^2} = 5", "5", TRIANGLE),
    ("39^{1}", "39", "Compute $6 \\times 8 - 9$."),
    ("3.9\\times 10", "39", "Compute $6 \\times 8 - 9$."),
    ("48 - 9", "39", "Compute $6 \\times 8 - 9$."),  # worked halfway: not a restatement
]


@pytest.mark.parametrize(("answer", "gold", "problem"), RIGHT_WITH_PROBLEM)
@pytest.mark.parametrize("boxed", [True, False])
def test_an_unevaluated_form_that_restates_nothing_is_right(
    answer: str, gold: str, problem: str, boxed: bool
) -> None:
    assert grade_answer(_response(answer, boxed), gold, problem=problem) is True


@pytest.mark.parametrize(("answer", "gold", "problem"), RIGHT_WITH_PROBLEM[:6])
def test_without_the_problem_a_computation_is_still_refused(
    answer: str, gold: str, problem: str
) -> None:
    # Documented: the grader called alone cannot tell restating from solving.
    assert grade_answer(_response(answer, boxed=True), gold) is False


RIGHT_NUMBERS = [  # (answer, gold): number forms v4 refused (issue 36, item 10), any caller
    ("(-3)/4", "-\\frac{3}{4}"),
    ("-1/-2", "\\frac{1}{2}"),
    ("(-1)/(2)", "-0.5"),
    ("-{5}", "-5"),
    ("\\boxed{\\boxed{\\boxed{5}}}", "5"),
    ("{{{{5}}}}", "5"),
    ("1 000", "1000"),
    ("1\\ 000", "1000"),
    ("12~345", "12345"),
    ("USD 5", "5"),
    ("€5", "5"),
    ("£5", "5"),
    ("5 euros", "5"),
    ("five", "5"),
    ("\\text{Five}", "5"),
    ("AB = \\sqrt{3^2+4^2} = 5", "5"),  # a chain worked out to the number
]


@pytest.mark.parametrize(("answer", "gold"), RIGHT_NUMBERS)
@pytest.mark.parametrize("problem", [None, "Find the value."])
def test_number_forms_are_read_as_written(answer: str, gold: str, problem: str | None) -> None:
    assert grade_answer(_response(answer, boxed=True), gold, problem=problem) is True


WRONG_NUMBERS = [  # near misses of the forms above stay wrong
    ("(-3)/4", "\\frac{3}{4}"),
    ("-{5}", "5"),
    ("1 000", "100"),
    ("1 00", "100"),  # not a group of three: not one number
    ("x^2 100", "100"),
    ("five", "4"),
    ("fives", "5"),
    ("AB = 5 = 6", "6"),  # a false statement
    ("USD 5", "6"),
    ("-(4)", "-4"),  # without the problem a signed bracket is a computation, as before
]


@pytest.mark.parametrize(("answer", "gold"), WRONG_NUMBERS)
def test_near_misses_of_those_forms_stay_wrong(answer: str, gold: str) -> None:
    assert grade_answer(_response(answer, boxed=True), gold) is False


def test_a_gold_written_as_a_shorthand_mixed_number_is_that_mixed_number() -> None:
    for gold in ("3\\frac12", "3\\frac{1}2", "3\\frac1{2}", "3\\dfrac12"):
        check_gold(gold)
        assert parse_answer(gold).value == parse_answer("\\frac72").value, gold
        assert grade_answer("\\boxed{3.5}", gold) is True
        assert grade_answer("\\boxed{\\frac{7}{2}}", gold) is True
        assert grade_answer("\\boxed{1.5}", gold) is False  # v4 read the gold as 3 * 1/2
    assert grade_answer("\\boxed{x^2\\frac12}", "\\frac{x^2}{2}") is True  # not after a power


def test_number_literals_take_signs_inside_brackets_and_any_braces() -> None:
    for literal in ("(-3)/4", "-1/-2", "(-1)/(2)", "-{5}", "{{{{5}}}}", "-{{5}}", "(39)"):
        assert is_number_literal(literal), literal
    for computation in ("-(4)", "--5", "-{-5}", "((39))", "(1)+(2)", "{1}{2}", "2^{10}"):
        assert not is_number_literal(computation), computation


# -- restating the problem is refused, in every written form ------------------------------------

COMPUTE = [
    p
    for p in generate_problems(300, seed=11)
    if p.problem.startswith("Compute ") and is_number_literal(normalize_answer(p.answer))
][:40]


def restatements(problem: str) -> list[str]:
    """The problem's expression behind the wrappings a policy could find."""
    e = problem.removeprefix("Compute ").removesuffix(".")
    forms = [
        e,
        e.replace(" ", ""),
        e.replace("\\times", "\\cdot"),
        e.replace("\\times", "*"),
        e.replace("\\frac", "\\dfrac"),
        f"({e})",
        f"\\left({e}\\right)",
        f"{{{e}}}",
        f"{e}+0",
        f"0+{e}",
        f"1\\cdot({e})",
        f"x = {e}",
        f"\\text{{{e}}}",
        f"\\text{{\\text{{{e}}}}}",
        f"{e}\\text{{ apples}}",
    ]
    for command in ("\\text{}", "\\text{ }", "\\mbox{}", "\\textbf{ }", "\\textit{}", "\\mathrm{}"):
        # an empty text block at every position between tokens
        forms += [e[:i] + command + e[i:] for i in range(len(e) + 1) if i == 0 or e[i - 1] == " "]
    return forms


def test_the_restating_family_is_large_and_all_its_problems_ask_for_a_number() -> None:
    assert len(COMPUTE) == 40
    assert sum(len(restatements(p.problem)) for p in COMPUTE) > 1500


@pytest.mark.parametrize("problem", COMPUTE, ids=[p.problem for p in COMPUTE])
@pytest.mark.parametrize("boxed", [True, False])
def test_a_restatement_of_the_problem_is_refused(problem: MathProblem, boxed: bool) -> None:
    paid = [
        form
        for form in restatements(problem.problem)
        if grade_answer(_response(form, boxed), problem.answer, problem=problem.problem)
    ]
    assert paid == []
    assert grade_answer(_response(problem.answer, boxed), problem.answer, problem=problem.problem)


@pytest.mark.parametrize(
    ("answer", "gold", "problem"),
    [
        ("6 \\times 8 - 9", "39", "Compute $6 \\times 8 - 9$."),
        ("6 \\cdot 8 - 9", "39", "Compute \\(6 \\times 8 - 9\\)."),
        ("(6\\times 8-9)+0", "39", "What is $6 \\times 8 - 9$?"),
        ("\\frac{6 \\times 8 - 9}{1}", "39", "Evaluate $6 \\times 8 - 9$ for me."),
        ("2^{10}", "1024", "Compute $2^{10}$."),
        ("2^{10}", "1024", "Compute 2^{10}."),
        ("\\binom{10}{3}", "120", "Compute $\\binom{10}{3}$."),
        ("5!", "120", "What is $5!$?"),
        ("\\sqrt{3^2+4^2}", "5", "Find $\\sqrt{3^2+4^2}$."),
    ],
)
@pytest.mark.parametrize("boxed", [True, False])
def test_restating_is_refused_whatever_the_problem_wraps_it_in(
    answer: str, gold: str, problem: str, boxed: bool
) -> None:
    assert grade_answer(_response(answer, boxed), gold, problem=problem) is False


def test_restates_problem_ignores_layout_and_is_not_fooled_by_longer_numerals() -> None:
    problem = "Compute $2^{100} + 6 \\times 8$."
    assert restates_problem("6\\cdot8", problem)
    assert restates_problem("2^{100}", problem)
    assert not restates_problem("2^{10}", problem)  # a prefix of 2^{100}, not the same
    assert not restates_problem("16\\times 8", problem)


def test_a_problem_that_is_not_text_is_a_callers_error() -> None:
    with pytest.raises(TypeError, match="problem must be the problem text"):
        grade_answer("\\boxed{5}", "5", problem=5)  # type: ignore[arg-type]


# -- over full episodes of every env that grades with this grader -----------------------------


def play(env_id: str, problem: MathProblem, answer: str) -> float:
    """One episode where every graded agent (or both debate solvers, the judge picking A) answers
    ``answer``; the team reward."""
    env = marft_envs.make(env_id, dataset=load_dataset([problem]))
    env.reset(seed=0)
    rewards = []
    for agent in env.agent_iter():
        _, reward, term, trunc, _ = env.last()
        if term or trunc:
            rewards.append(reward)
            env.step(None)
            continue
        if agent == "judge":
            text = "Verdict: A"
        elif agent.startswith("solver") or env.unwrapped.profiles[agent].graded:
            text = _response(answer, boxed=True)
        else:
            text = "Let me think step by step."
        env.step(text)
    assert rewards
    return max(rewards)  # the graded agents' reward (a dual team's reasoner may get none)


GRADED_ENVS = [
    "math-single-v7",
    "math-dual-v7",
    "math-trio-v7",
    "math-dual-retry-v7",
    "tool-math-single-v7",
    "tool-math-dual-v7",
    "debate-v7",
]


@pytest.mark.parametrize("env_id", GRADED_ENVS)
def test_restating_pays_nothing_over_full_episodes(env_id: str) -> None:
    paid, total = 0, 0
    for problem in COMPUTE[:8]:
        forms = restatements(problem.problem)
        for form in forms[:16] + forms[16::7]:  # every wrapping, and empty blocks spread out
            total += 1
            paid += play(env_id, problem, form) > 0
        assert play(env_id, problem, problem.answer) == 1.0  # the number itself is paid
    assert total > 150 and paid == 0


@pytest.mark.parametrize("env_id", GRADED_ENVS)
@pytest.mark.parametrize(
    ("answer", "gold", "problem"),
    [
        ("2^{10}", "1024", SUBSETS),
        ("\\binom{10}{3}", "120", COMMITTEE),
        ("5!", "120", QUEUE),
        ("AB = \\sqrt{3^2+4^2} = 5", "5", TRIANGLE),
    ],
)
def test_the_env_hands_the_problem_so_a_right_unevaluated_answer_is_paid(
    env_id: str, answer: str, gold: str, problem: str
) -> None:
    assert play(env_id, MathProblem(problem, gold), answer) == 1.0
    # The same answer to a problem that already wrote it out restates it.
    restated = answer.split("=")[1] if "=" in answer else answer
    assert play(env_id, MathProblem(f"Compute ${restated}$.", gold), restated) == 0.0


@pytest.mark.parametrize("env_id", GRADED_ENVS)
def test_a_shorthand_mixed_number_gold_pays_its_value_over_an_episode(env_id: str) -> None:
    problem = MathProblem("Add $3$ and $\\frac{1}{2}$.", "3\\frac12")
    assert play(env_id, problem, "3.5") == 1.0
    assert play(env_id, problem, "1.5") == 0.0
