"""The OpenAI chat-completions wire surface, shared by every route that speaks it.

The in-process client and the training endpoint of agent programs (:mod:`marft_envs.programs`)
and the endpoint that serves a trained team (:mod:`marft_algos.serving`) all use these, so a
request is checked, answered and refused the same way whichever route it takes:

- :mod:`~marft_envs.wire.protocol`: the typed response (``ChatCompletion`` and its parts), the
  :class:`Reply` it is built from, the :class:`RequestLimits` on a request, and the errors
  (:class:`RequestRefused`, :class:`UnknownAgentError`);
- :mod:`~marft_envs.wire.checks`: checks of one request (:func:`check_request`);
- :mod:`~marft_envs.wire.http`: errors in the OpenAI error shape, the loopback ``Host`` check,
  a JSON body read within its bound;
- :mod:`~marft_envs.wire.prompts`: the bound on a call's rendered prompt (the model's context less
  the agent's reply budget, or ``max_prompt_tokens``), checked before generation;
- :mod:`~marft_envs.wire.tools`: tool-call parsing, and tools described in text for chat
  templates without tool support;
- :mod:`~marft_envs.wire.responses`: the Responses API (``POST /v1/responses``) translated onto
  the chat-completions call path, and its ``Response`` objects;
- :mod:`~marft_envs.wire.streaming`: ``stream=true`` replies as server-sent events;
- :mod:`~marft_envs.wire.formats`: structured outputs (``response_format``, ``text.format``),
  checked in the OpenAI shape and not enforced;
- :mod:`~marft_envs.wire.routes`: model cards, and unknown routes as JSON errors.
"""

from marft_envs.wire.checks import check_request, check_request_size, finite_number
from marft_envs.wire.protocol import (
    ChatCompletion,
    Choice,
    Function,
    Message,
    Reply,
    RequestLimits,
    RequestRefused,
    ToolCall,
    UnknownAgentError,
    Usage,
    completion,
    without_none,
)
from marft_envs.wire.tools import (
    TOOL_PARSERS,
    TOOL_PROMPTS,
    ToolParser,
    hermes_prompt,
    parse_hermes,
    parse_tool_calls,
    policy_messages,
    register_tool_parser,
    resolve_parser,
)

__all__ = [
    "TOOL_PARSERS",
    "TOOL_PROMPTS",
    "ChatCompletion",
    "Choice",
    "Function",
    "Message",
    "Reply",
    "RequestLimits",
    "RequestRefused",
    "ToolCall",
    "ToolParser",
    "UnknownAgentError",
    "Usage",
    "check_request",
    "check_request_size",
    "completion",
    "finite_number",
    "hermes_prompt",
    "parse_hermes",
    "parse_tool_calls",
    "policy_messages",
    "register_tool_parser",
    "resolve_parser",
    "without_none",
]
