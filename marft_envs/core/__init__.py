"""The Flex-POMDP core: profiles, spaces, dependency functions, credit assignment, base env."""

from marft_envs.core.credit import CREDIT_RULES, assign_credit
from marft_envs.core.dependency import (
    DAG,
    Chain,
    DependencyFunction,
    Independent,
    Orchestrator,
    RoundState,
    Router,
    Turn,
)
from marft_envs.core.env import FlexPOMDPEnv, RoundRecord, Transition
from marft_envs.core.profiles import AgentProfile, as_profiles
from marft_envs.core.spaces import ChatObservation, ChatSpace, TextSpace, ToolSpace

__all__ = [
    "CREDIT_RULES",
    "DAG",
    "AgentProfile",
    "Chain",
    "ChatObservation",
    "ChatSpace",
    "DependencyFunction",
    "FlexPOMDPEnv",
    "Independent",
    "Orchestrator",
    "RoundRecord",
    "RoundState",
    "Router",
    "TextSpace",
    "ToolSpace",
    "Transition",
    "Turn",
    "as_profiles",
    "assign_credit",
]
