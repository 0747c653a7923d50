"""A helper shared by the puzzle tests: play one episode with a scripted policy."""

from __future__ import annotations

import pytest

import marft_envs


def _play(env_id, text_for, seed=0, **kwargs):
    """Step one episode of ``env_id``, each agent answering ``text_for(agent, unwrapped_env)``;
    returns ``{agent: (final reward, final info)}``."""
    env = marft_envs.make(env_id, **kwargs)
    env.reset(seed=seed)
    final = {}
    for agent in env.agent_iter():
        _, reward, term, trunc, info = env.last()
        if term or trunc:
            final[agent] = (reward, info)
            env.step(None)
            continue
        env.step(text_for(agent, env.unwrapped))
    return final


@pytest.fixture
def play():
    return _play
