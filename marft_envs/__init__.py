"""marft_envs: the Flex-POMDP environment suite for LLM teams.

>>> import marft_envs
>>> env = marft_envs.make("relay-v0")
>>> env.reset(seed=0)
>>> env.agent_selection
'scout'
"""

from marft_envs import envs as _envs  # noqa: F401  (registers the built-in environments)
from marft_envs.core import (
    CREDIT_RULES,
    DAG,
    AgentProfile,
    Chain,
    ChatObservation,
    ChatSpace,
    DependencyFunction,
    FlexPOMDPEnv,
    Independent,
    Orchestrator,
    RoundRecord,
    RoundState,
    Router,
    TextSpace,
    ToolSpace,
    Transition,
    Turn,
)
from marft_envs.gym_bridge import GymnasiumEnv, make_gymnasium
from marft_envs.registration import (
    ENTRY_POINT_GROUP,
    EntryPointError,
    EnvSpec,
    OutdatedEnvWarning,
    UnknownEnvError,
    deprecate,
    load_plugins,
    make,
    pprint_registry,
    register,
    register_program,
    registry,
    spec,
)

__version__ = "0.1.0"

__all__ = [
    "CREDIT_RULES",
    "DAG",
    "ENTRY_POINT_GROUP",
    "AgentProfile",
    "Chain",
    "ChatObservation",
    "ChatSpace",
    "DependencyFunction",
    "EntryPointError",
    "EnvSpec",
    "FlexPOMDPEnv",
    "GymnasiumEnv",
    "Independent",
    "Orchestrator",
    "OutdatedEnvWarning",
    "RoundRecord",
    "RoundState",
    "Router",
    "TextSpace",
    "ToolSpace",
    "Transition",
    "Turn",
    "UnknownEnvError",
    "deprecate",
    "load_plugins",
    "make",
    "make_gymnasium",
    "pprint_registry",
    "register",
    "register_program",
    "registry",
    "spec",
]
