"""Tool calls of agent programs: parsing a reply into ``tool_calls``, and describing tools in text.

A call with ``tools=[...]`` reaches the policy with the tools in its observation; the policy renders
them with the model's chat template (models whose template supports tools: Qwen2.5, Hermes, Llama
3.1, ...). What the model samples is text; a **tool parser** turns it into the response's
``content`` and ``tool_calls``. What is trained on stays the rendered prompt ids and the sampled ids:
the parse only shapes what the program receives.

Parsers (``tool_parser=`` at registration; add your own with :func:`register_tool_parser`):

- ``"hermes"`` (default): ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks, the
  format of Hermes and Qwen models. A reply whose blocks are not all valid JSON objects with a
  ``name`` is returned whole as ``content`` with no tool calls, so the program sees what the model
  wrote (a failed hand-off, not a crash).

For models whose template has no tool support (SmolLM2, the built-in model), ``tool_prompt="hermes"``
makes the env describe the tools in the system prompt and write earlier tool calls and results as
text (:func:`hermes_prompt`), so every template can render the call; replies are parsed as above.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from marft_envs.wire.protocol import Function, ToolCall

__all__ = [
    "TOOL_PARSERS",
    "TOOL_PROMPTS",
    "Function",
    "ToolCall",
    "ToolParser",
    "hermes_prompt",
    "parse_hermes",
    "parse_tool_calls",
    "policy_messages",
    "register_tool_parser",
    "resolve_parser",
    "template_message",
]

#: What a parser returns: the reply's text outside tool calls (None when empty) and each call's
#: ``(name, arguments)``, arguments as a JSON object string.
ParsedReply = tuple[str | None, list[tuple[str, str]]]
ToolParser = Callable[[str], ParsedReply]


_BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


def parse_hermes(text: str) -> ParsedReply:
    """``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks (Hermes, Qwen).

    Returns:
        The text before the first block (None when blank) and the calls; the whole text and no
        calls when a block is not a JSON object with a string ``name`` and object ``arguments``,
        or when a block is left open.
    """
    if "<tool_call>" not in text:
        return text, []
    calls = []
    for block in _BLOCK.findall(text):
        try:
            call = json.loads(block)
        except ValueError:
            return text, []
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            return text, []
        arguments = call.get("arguments", call.get("parameters", {}))
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError:
                return text, []
        if not isinstance(arguments, dict):
            return text, []
        calls.append((call["name"], json.dumps(arguments, ensure_ascii=False)))
    if not calls or text.count("<tool_call>") != len(calls):
        return text, []  # a block left open (e.g. cut at the token budget)
    content = text[: text.index("<tool_call>")].strip()
    return content or None, calls


TOOL_PARSERS: dict[str, ToolParser] = {"hermes": parse_hermes}


def register_tool_parser(name: str, parser: ToolParser) -> None:
    """Make ``tool_parser=name`` available: ``parser(text) -> (content or None, [(name, json)])``."""
    if not callable(parser):
        raise TypeError(f"a tool parser must be a function of the reply text, got {parser!r:.80}.")
    TOOL_PARSERS[name] = parser


def resolve_parser(parser: str | ToolParser) -> ToolParser:
    """A parser by name (:data:`TOOL_PARSERS`) or the function itself."""
    if callable(parser):
        return parser
    if parser not in TOOL_PARSERS:
        raise ValueError(
            f"tool_parser={parser!r} is not known; the parsers are {sorted(TOOL_PARSERS)} (add "
            f"one with marft_envs.programs.register_tool_parser)."
        )
    return TOOL_PARSERS[parser]


def parse_tool_calls(
    text: str, parser: ToolParser, call_index: int
) -> tuple[str | None, list[ToolCall]]:
    """The reply's content and tool calls; ids ``call_<call index>_<k>`` are unique per episode."""
    content, calls = parser(text)
    return content, [
        ToolCall(id=f"call_{call_index}_{k}", function=Function(name, arguments))
        for k, (name, arguments) in enumerate(calls)
    ]


# ---------------------------------------------------------------------- tools described in text
def _tool_line(tool: Mapping[str, Any]) -> str:
    return json.dumps(tool.get("function", tool), ensure_ascii=False)


def arguments_object(arguments: Any) -> Any:
    """Tool-call arguments as an object (chat templates take them so), parsed from JSON text;
    text that is not JSON stays as it is."""
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except ValueError:
            return arguments
    return arguments


def hermes_prompt(
    messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None
) -> list[dict[str, str]]:
    """A transcript with tools as plain ``role``/``content`` messages, for any chat template.

    The tools are listed, one JSON signature a line inside ``<tools>``, after the system prompt
    (a system message is added when there is none), with how to call them; an assistant message's
    tool calls become ``<tool_call>`` blocks after its text, and a tool result a user message
    ``<tool_response>...</tool_response>``.
    """
    out: list[dict[str, str]] = []
    for m in messages:
        content = str(m.get("content") or "")
        if m.get("tool_calls"):
            blocks = [
                "<tool_call>"
                + json.dumps(
                    {
                        "name": c["function"]["name"],
                        "arguments": arguments_object(c["function"]["arguments"]),
                    },
                    ensure_ascii=False,
                )
                + "</tool_call>"
                for c in m["tool_calls"]
            ]
            content = "\n".join(([content] if content else []) + blocks)
        if m["role"] == "tool":
            out.append({"role": "user", "content": f"<tool_response>\n{content}\n</tool_response>"})
        else:
            out.append({"role": str(m["role"]), "content": content})
    if tools:
        signatures = "\n".join(_tool_line(t) for t in tools)
        described = (
            "You can call tools. Their signatures, one JSON object a line:\n"
            f"<tools>\n{signatures}\n</tools>\n"
            'To call a tool, reply with <tool_call>{"name": "<tool name>", "arguments": '
            "{<arguments as JSON>}}</tool_call>, one block per call."
        )
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": f"{out[0]['content']}\n\n{described}"}
        else:
            out.insert(0, {"role": "system", "content": described})
    return out


#: ``tool_prompt=`` choices: how the env writes tools into the transcript for templates without
#: tool support.
TOOL_PROMPTS: dict[str, Callable[..., list[dict[str, str]]]] = {"hermes": hermes_prompt}


def template_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """A message as chat templates take it: tool-call arguments as objects, not JSON text (how
    :class:`~marft_envs.programs.ProgramEnv` hands a call's messages to the policy, and
    ``marft serve`` too)."""
    out = dict(message)
    if "tool_calls" in out:
        out["tool_calls"] = [
            {
                **c,
                "function": {
                    **c["function"],
                    "arguments": arguments_object(c["function"]["arguments"]),
                },
            }
            for c in out["tool_calls"]
        ]
    return out


def policy_messages(
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None,
    tool_prompt: str | None,
) -> list[dict[str, Any]]:
    """A call's messages as the policy renders them (the program env's observation, and a call
    of ``marft serve``): with ``tool_prompt``, the transcript written as text by
    :data:`TOOL_PROMPTS`; otherwise each message as chat templates take it."""
    if tool_prompt is not None:
        return TOOL_PROMPTS[tool_prompt](messages, tools)
    return [template_message(m) for m in messages]
