"""One-agent environments also work as gymnasium.Env and pass gymnasium's checker."""

from __future__ import annotations

import warnings

import pytest
from gymnasium.utils.env_checker import check_env

import marft_envs
from marft_envs.gym_bridge import GymnasiumEnv, make_gymnasium

ONE_AGENT = [{"role": "solo", "system_prompt": "Say the code.", "graded": True}]


def test_one_agent_env_passes_gymnasium_env_checker():
    env = make_gymnasium("relay-v0", profiles=ONE_AGENT, horizon=2)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*(render modes|spec)")
        check_env(env, skip_render_check=True)


def test_gymnasium_step_semantics_with_retries_and_round_info():
    env = make_gymnasium("relay-v0", profiles=ONE_AGENT, horizon=2)
    obs, info = env.reset(seed=0)
    code = env.aec.unwrapped.code
    assert obs["messages"][-1]["content"] == f"The secret code is {code}."
    obs, reward, terminated, truncated, info = env.step("no idea")
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert info["correct"] is False and info["timestep"] == 1  # last round's result is reported
    obs, reward, terminated, truncated, info = env.step(f"It is {code}")
    assert (reward, terminated, truncated) == (1.0, True, False)


def test_teams_are_rejected_with_a_pointer_to_pettingzoo():
    with pytest.raises(ValueError, match="one-agent environment"):
        GymnasiumEnv(marft_envs.make("relay-v0"))


def test_math_single_env_through_gymnasium():
    env = marft_envs.make_gymnasium("math-single-v7")
    env.reset(seed=0)
    gold = env.aec.unwrapped.problem.answer
    _, reward, terminated, truncated, info = env.step(f"The answer is \\boxed{{{gold}}}")
    assert (reward, terminated, truncated) == (1.0, True, False) and info["correct"] is True
    env.reset(seed=0)
    assert env.step("no idea")[1] == 0.0
