"""Agent programs as Flex-POMDP envs: train the team you already have.

A team written as a program — ``program(task, client)`` calling
``client.chat.completions.create(model=AGENT, messages=...)`` — becomes an env with
:func:`marft_envs.register_program`. Each model call is one AEC step of the agent it names; the
program's own control flow is the dependency function (docs/programs.md).
"""

from marft_envs.programs.client import (
    ChatCompletion,
    EpisodeEnded,
    ProgramClient,
    UnknownAgentError,
)
from marft_envs.programs.env import ProgramEnv, ProgramTurns
from marft_envs.programs.rewards import combine_reward
from marft_envs.programs.tools import (
    TOOL_PARSERS,
    hermes_prompt,
    parse_hermes,
    register_tool_parser,
)

__all__ = [
    "TOOL_PARSERS",
    "ChatCompletion",
    "EpisodeEnded",
    "ProgramClient",
    "ProgramEnv",
    "ProgramTurns",
    "UnknownAgentError",
    "combine_reward",
    "hermes_prompt",
    "parse_hermes",
    "register_tool_parser",
]
