"""Every registered environment passes PettingZoo's API and seed tests and survives fuzzing.

Parametrised over ``marft_envs.registry``, so every future env is covered automatically.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from pettingzoo.test import api_test, seed_test

import marft_envs

ENV_IDS = sorted(marft_envs.registry)


@pytest.fixture(autouse=True)
def _quiet_pettingzoo_style_warnings():
    # api_test warns that text observations are not NumPy arrays and that agents are not named
    # "player_0"; both are deliberate for language environments.
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message=".*(NumPy array|probably should be|recommend agents)"
        )
        yield


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_pettingzoo_api(env_id):
    api_test(marft_envs.make(env_id), num_cycles=100)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_pettingzoo_seed(env_id):
    seed_test(lambda: marft_envs.make(env_id), num_cycles=20)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_random_text_fuzzing_never_raises_and_scores_garbage_zero(env_id):
    env = marft_envs.make(env_id)
    rng = np.random.default_rng(0)
    episodes = 0
    for episode in range(25):
        env.reset(seed=episode)
        for k, name in enumerate(env.possible_agents):
            env.action_space(name).seed(episode * 100 + k)
        for agent in env.agent_iter(max_iter=200):
            obs, reward, term, trunc, _info = env.last()
            assert env.observation_space(agent).contains(obs)
            assert np.isfinite(reward)
            if term or trunc:
                env.step(None)
                continue
            action = env.action_space(agent).sample()
            if rng.random() < 0.2:
                action = "\\boxed{" + action  # unbalanced LaTeX
            env.step(action)
        episodes += 1
        # Random text never earns a reward.
        assert all(r.rewards[a] == 0.0 for r in env.unwrapped.history for a in r.rewards)
    assert episodes == 25


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_observations_are_chat_messages_without_template_tokens(env_id):
    env = marft_envs.make(env_id)
    env.reset(seed=0)
    messages = env.observe(env.agent_selection)["messages"]
    assert messages[-1]["role"] == "user"
    for message in messages:
        for token in ("<|im_start|>", "<|im_end|>", "<s>", "[INST]"):
            assert token not in message["content"]


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_bad_actions_get_clear_errors(env_id):
    env = marft_envs.make(env_id)
    env.reset(seed=0)
    agent = env.agent_selection
    with pytest.raises(TypeError, match=f"{agent}.*must be a str"):
        env.step(123)
    with pytest.raises(ValueError, match="still live"):
        env.step(None)
    # The env is still usable after rejected actions.
    assert env.agent_selection == agent


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_stepping_after_the_episode_ended_raises(env_id):
    env = marft_envs.make(env_id)
    env.reset(seed=0)
    for _agent in env.agent_iter():
        _, _, term, trunc, _ = env.last()
        env.step(None if term or trunc else "nothing useful")
    assert env.agents == []
    with pytest.raises(RuntimeError, match="reset"):
        env.step("late")


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_enormous_action_is_cut_with_a_flag(env_id, caplog):
    env = marft_envs.make(env_id, max_action_length=1000)
    env.reset(seed=0)
    agent = env.agent_selection
    env.step("7" * 1_000_000)
    record = (
        env.unwrapped.round_state.actions[0] if env.agents else env.unwrapped.history[-1].actions[0]
    )
    assert record[0] == agent and len(record[1]) == 1000
    assert "max_action_length" in caplog.text
