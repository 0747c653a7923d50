"""Use a one-agent environment as a ``gymnasium.Env``.

Single-agent RL tooling (Gymnasium wrappers, vector envs, the env checker) expects the
``reset() -> (obs, info)`` / ``step(a) -> (obs, reward, terminated, truncated, info)`` API. Any
one-agent :class:`~marft_envs.FlexPOMDPEnv` (e.g. ``math-single-v7``) can be used that way::

    env = marft_envs.make_gymnasium("math-single-v7")
    obs, info = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step("\\\\boxed{4}")
"""

from __future__ import annotations

from typing import Any

import gymnasium
from pettingzoo import AECEnv

from marft_envs.registration import make

__all__ = ["GymnasiumEnv", "make_gymnasium"]


class GymnasiumEnv(gymnasium.Env):
    """Adapts a one-agent PettingZoo AEC env to the Gymnasium API.

    Args:
        env: An AEC env whose team has exactly one agent.
    """

    def __init__(self, env: AECEnv) -> None:
        if len(env.possible_agents) != 1:
            raise ValueError(
                f"GymnasiumEnv needs a one-agent environment; this one has agents "
                f"{list(env.possible_agents)}. Use the PettingZoo API for teams."
            )
        self.aec = env
        self.agent = env.possible_agents[0]
        self.observation_space = env.observation_space(self.agent)
        self.action_space = env.action_space(self.agent)
        self.metadata = dict(getattr(env, "metadata", {}))
        self.render_mode = getattr(env.unwrapped, "render_mode", None)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self.aec.reset(seed=seed, options=options)
        observation, _, _, _, info = self.aec.last()
        return observation, dict(info)

    def step(self, action: str) -> tuple[Any, float, bool, bool, dict]:
        self.aec.step(action)
        observation, reward, terminated, truncated, info = self.aec.last()
        if terminated or truncated:
            self.aec.step(None)  # retire the agent so the AEC episode closes cleanly
        return observation, float(reward), bool(terminated), bool(truncated), dict(info)

    def render(self) -> Any:
        return self.aec.render()

    def close(self) -> None:
        self.aec.close()


def make_gymnasium(env_id: str, **overrides: Any) -> GymnasiumEnv:
    """``marft_envs.make(env_id, **overrides)`` adapted to the Gymnasium API (one-agent envs)."""
    return GymnasiumEnv(make(env_id, **overrides))
