"""Small built-in tasks that exercise the core: information relay and orchestrated routing."""

from marft_envs.toy.dispatch import DispatchEnv
from marft_envs.toy.relay import RelayEnv

__all__ = ["DispatchEnv", "RelayEnv"]
