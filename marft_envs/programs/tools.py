"""Tool calls of agent programs, kept importable here: they live in :mod:`marft_envs.wire.tools`
(shared with ``marft serve``)."""

from marft_envs.wire.tools import (
    TOOL_PARSERS,
    TOOL_PROMPTS,
    Function,
    ParsedReply,
    ToolCall,
    ToolParser,
    arguments_object,
    hermes_prompt,
    parse_hermes,
    parse_tool_calls,
    policy_messages,
    register_tool_parser,
    resolve_parser,
    template_message,
)

__all__ = [
    "TOOL_PARSERS",
    "TOOL_PROMPTS",
    "Function",
    "ParsedReply",
    "ToolCall",
    "ToolParser",
    "arguments_object",
    "hermes_prompt",
    "parse_hermes",
    "parse_tool_calls",
    "policy_messages",
    "register_tool_parser",
    "resolve_parser",
    "template_message",
]
