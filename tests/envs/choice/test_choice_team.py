"""choice-team-v1: the planner's choice decides whether the solver can be right; each option is
graded; the right-choice rate is in the info as a weight-0 reward part."""

from __future__ import annotations

import copy

import numpy as np
import pytest

import marft_envs
from marft_envs.choice.tasks import (
    OPERATIONS,
    SYMBOLS,
    ChoiceTask,
    draw_task,
    parse_choice,
    solver_problem,
    task_value,
)
from marft_envs.core.splits import in_test_split


def _play(planner_text, solver_text_for, seed=0, **kwargs):
    """One episode: the planner writes ``planner_text``, the solver ``solver_text_for(env)``;
    returns (final rewards, final info, the solver's observation text)."""
    env = marft_envs.make("choice-team-v1", **kwargs)
    env.reset(seed=seed)
    rewards, info, seen = {}, {}, ""
    for agent in env.agent_iter():
        obs, reward, term, trunc, info = env.last()
        if term or trunc:
            rewards[agent] = reward
            env.step(None)
            continue
        if agent == "planner":
            env.step(planner_text)
        else:
            seen = obs["messages"][-1]["content"]
            env.step(solver_text_for(env.unwrapped))
    return rewards, info, seen


def _right_answer(env):
    return f"\\boxed{{{env.task.answer}}}"


def test_task_values_hand_computed():
    task = ChoiceTask(7, 3, "times", (("+", 4),))
    assert task.request == "Use Times. Compute 7 ? 3."
    assert task.answer == 25
    assert [task_value(task, op) for op in OPERATIONS] == [14, 8, 25]
    assert solver_problem(task, "minus") == "Compute 7 - 3 + 4."
    assert solver_problem(task, "times") == "Compute 7 \\times 3 + 4."
    assert solver_problem(task, None) == "Compute 7 ? 3 + 4."


def test_the_three_options_always_give_different_values():
    rng = np.random.default_rng(0)
    for _ in range(500):
        task = draw_task(rng)
        assert 2 <= task.b < task.a <= 9
        assert task.answer >= 0
        values = {task_value(task, op) for op in OPERATIONS}
        assert len(values) == 3, task


@pytest.mark.parametrize(
    ("text", "choice"),
    [
        ("7 \\times 3 = 21", "times"),
        ("7 * 3", "times"),
        ("7 \u00d7 3", "times"),
        ("7 + 3 = 10\n10 - 4 = 6", "plus"),
        ("7 - 3 + 4", "minus"),
        ("So the result is 7", None),
        ("", None),
    ],
)
def test_parse_choice_reads_the_first_symbol(text, choice):
    assert parse_choice(text) == choice


@pytest.mark.parametrize("operation", OPERATIONS)
def test_each_option_is_graded_and_only_the_right_one_can_win(operation):
    """For each task operation: the right symbol with the right answer pays 1; each wrong symbol
    pays 0 even with the answer of the problem the solver got (and with the gold answer)."""
    seed = next(
        s
        for s in range(1000)
        if (env := marft_envs.make("choice-team-v1")).reset(seed=s) is None
        and env.unwrapped.task.operation == operation
    )
    for chosen in OPERATIONS:
        right = chosen == operation
        planner = f"7 {SYMBOLS[chosen]} 3"

        def solver_own_value(env, chosen=chosen):
            return f"\\boxed{{{task_value(env.task, chosen)}}}"

        rewards, info, seen = _play(planner, solver_own_value, seed=seed)
        assert SYMBOLS[chosen] in seen and "?" not in seen
        assert info["choice"] == chosen and info["operation"] == operation
        assert info["reward_parts"] == {"success": float(right), "right_choice": float(right)}
        assert rewards == {"planner": float(right), "solver": float(right)}
        if not right:
            rewards, info, _ = _play(planner, _right_answer, seed=seed)
            assert info["correct"] is True  # the gold answer is still paid: only a slip gets it
            assert info["reward_parts"]["right_choice"] == 0.0


def test_no_symbol_leaves_the_question_mark_and_fails():
    _rewards, info, seen = _play("So the result", lambda env: "\\boxed{3}", seed=1)
    assert "?" in seen
    assert info["choice"] is None
    assert info["reward_parts"]["right_choice"] == 0.0


def test_planner_sees_the_request_not_the_tail_and_solver_not_the_planner():
    env = marft_envs.make("choice-team-v1")
    env.reset(seed=3)
    task = env.unwrapped.task
    planner_obs = env.observe("planner")["messages"][-1]["content"]
    assert planner_obs == f"Problem: {task.request}"
    env.step("I think 9 \\times 9 is fun")
    solver_obs = env.observe("solver")["messages"][-1]["content"]
    assert "fun" not in solver_obs
    assert solver_obs == f"Problem: {solver_problem(task, 'times')}"


def test_splits_are_disjoint_and_the_env_copies():
    for split, held_out in (("train", False), ("test", True)):
        env = marft_envs.make("choice-team-v1", split=split)
        for seed in range(40):
            env.reset(seed=seed)
            assert in_test_split(env.unwrapped.task.key) == held_out
    env = marft_envs.make("choice-team-v1")
    env.reset(seed=5)
    env.step("5 + 2")
    twin = copy.deepcopy(env)
    assert twin.observe("solver") == env.observe("solver")


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="tail_length"):
        marft_envs.make("choice-team-v1", tail_length=-1)
    with pytest.raises(ValueError, match="split"):
        marft_envs.make("choice-team-v1", split="dev")
    with pytest.raises(ValueError, match="graded solver"):
        marft_envs.make(
            "choice-team-v1",
            profiles=[{"role": "a", "system_prompt": "x"}, {"role": "b", "system_prompt": "y"}],
        )
