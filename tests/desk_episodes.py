"""Play one episode of a reset support-desk env with scripted replies (the benchmark desks'
tests share it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def play_rewards(env: Any, reply: Callable[[str, list[dict[str, str]]], str]) -> dict[str, float]:
    """Step a reset AEC env to its end, answering each agent's call with ``reply(agent,
    messages)``; returns each agent's summed reward."""
    rewards: dict[str, float] = {}
    while env.agents:
        agent = env.agent_selection
        if env.terminations[agent] or env.truncations[agent]:
            env.step(None)
            continue
        env.step(reply(agent, env.observe(agent)["messages"]))
        for name, value in env.rewards.items():
            rewards[name] = rewards.get(name, 0.0) + value
    return rewards
