"""Agent programs as Flex-POMDP envs: train the team you already have.

A team written as a program — ``program(task, client)`` calling
``client.chat.completions.create(model=AGENT, messages=...)`` — becomes an env with
:func:`marft_envs.register_program`. Each model call is one AEC step of the agent it names; the
program's own control flow is the dependency function (docs/programs.md).

The env's parts, one module each: ``settings`` (:class:`ProgramSettings`), ``tasks`` (tasks and
split), ``failures`` (how an episode ends), ``transport`` (how the program reaches the policy:
``client``, ``server``, ``runner``, ``isolation``), and ``env`` (the Flex-POMDP hooks). The OpenAI
wire format they speak is :mod:`marft_envs.wire`, shared with ``marft serve``.
"""

from marft_envs.programs.client import (
    ChatCompletion,
    EpisodeEnded,
    ProgramClient,
    UnknownAgentError,
)
from marft_envs.programs.env import ProgramEnv, ProgramTurns
from marft_envs.programs.rewards import combine_reward
from marft_envs.programs.settings import ProgramSettings
from marft_envs.programs.tools import (
    TOOL_PARSERS,
    hermes_prompt,
    parse_hermes,
    register_tool_parser,
)
from marft_envs.wire.protocol import RequestLimits, RequestRefused

__all__ = [
    "TOOL_PARSERS",
    "ChatCompletion",
    "EpisodeEnded",
    "ProgramClient",
    "ProgramEnv",
    "ProgramSettings",
    "ProgramTurns",
    "RequestLimits",
    "RequestRefused",
    "UnknownAgentError",
    "combine_reward",
    "hermes_prompt",
    "parse_hermes",
    "register_tool_parser",
]
