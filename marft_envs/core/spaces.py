"""Spaces for language actions and chat observations.

gymnasium's ``Text`` space defaults to an alphanumeric charset and rejects real LLM output
(punctuation, newlines, LaTeX). :class:`TextSpace` accepts *any* string up to a length limit;
:class:`ChatSpace` holds a chat transcript (``[{"role": ..., "content": ...}]``);
:class:`ToolSpace` the tool definitions a call offers, and :class:`ChatObservation` both (agent
programs whose calls carry ``tools``).
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium.spaces import Dict, Space

__all__ = ["CHAT_ROLES", "ChatObservation", "ChatSpace", "TextSpace", "ToolSpace"]

CHAT_ROLES = ("system", "user", "assistant")

#: Fields a message may carry besides ``role`` and ``content`` in a transcript with tool calls (the
#: shape ``tokenizer.apply_chat_template`` takes): an assistant's ``tool_calls``, a tool result's
#: ``tool_call_id`` and ``name``.
TOOL_MESSAGE_FIELDS = frozenset({"tool_calls", "tool_call_id", "name"})

# Characters `sample()` draws from: printable ASCII, whitespace and a few non-ASCII symbols an LLM
# emits in maths, so random actions exercise parsers with realistic garbage.
_SAMPLE_CHARSET = tuple(string.printable) + tuple("πθ√×÷≤≥−±°€éü中")


class TextSpace(Space[str]):
    """Any Python string of at most ``max_length`` characters.

    Args:
        max_length: Largest accepted length, in characters.
        min_length: Smallest accepted length.
        sample_max_length: Longest string :meth:`sample` draws (keeps sampling cheap).
        seed: Seed for :meth:`sample`.
    """

    def __init__(
        self,
        max_length: int = 8192,
        *,
        min_length: int = 0,
        sample_max_length: int = 64,
        seed: int | np.random.Generator | None = None,
    ) -> None:
        if not 0 <= min_length <= max_length:
            raise ValueError(
                f"TextSpace needs 0 <= min_length <= max_length; got min_length={min_length}, "
                f"max_length={max_length}."
            )
        self.max_length = int(max_length)
        self.min_length = int(min_length)
        self.sample_max_length = int(max(min(sample_max_length, max_length), min_length))
        super().__init__(dtype=str, seed=seed)

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        """A random string drawn from printable characters and common maths symbols."""
        length = int(self.np_random.integers(self.min_length, self.sample_max_length + 1))
        indices = self.np_random.integers(0, len(_SAMPLE_CHARSET), size=length)
        return "".join(_SAMPLE_CHARSET[i] for i in indices)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"TextSpace(max_length={self.max_length})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, TextSpace)
            and other.max_length == self.max_length
            and other.min_length == self.min_length
        )

    def __hash__(self) -> int:
        return hash((TextSpace, self.max_length, self.min_length))


class ChatSpace(Space[list]):
    """A list of chat messages ``{"role": r, "content": text}`` with ``r`` in ``roles``.

    Args:
        max_length: Largest total number of characters over all message contents.
        max_messages: Largest number of messages.
        roles: Allowed message roles.
        tool_messages: Also accept the messages of a transcript with tool calls: role ``"tool"``
            (with ``tool_call_id``), and an assistant message's ``tool_calls`` (a list of
            ``{"id", "type": "function", "function": {"name", "arguments"}}``).
        seed: Seed for :meth:`sample`.
    """

    def __init__(
        self,
        max_length: int = 65536,
        *,
        max_messages: int = 256,
        roles: Sequence[str] = CHAT_ROLES,
        tool_messages: bool = False,
        seed: int | np.random.Generator | None = None,
    ) -> None:
        self.max_length = int(max_length)
        self.max_messages = int(max_messages)
        self.tool_messages = bool(tool_messages)
        self.roles = tuple(roles) + (("tool",) if tool_messages and "tool" not in roles else ())
        self._text = TextSpace(max_length)
        super().__init__(dtype=None, seed=seed)

    def seed(self, seed: int | None = None) -> int:
        """Seed :meth:`sample`; returns the seed used, as gymnasium's ``Space.seed`` does."""
        used = int(super().seed(seed))
        self._text.seed(int(self.np_random.integers(2**31)))
        return used

    def sample(self, mask: Any = None, probability: Any = None) -> list[dict[str, str]]:
        """A random system + user transcript."""
        return [
            {"role": "system", "content": self._text.sample()},
            {"role": "user", "content": self._text.sample()},
        ]

    def contains(self, x: Any) -> bool:
        if not isinstance(x, list | tuple) or len(x) > self.max_messages:
            return False
        total = 0
        for message in x:
            if not isinstance(message, dict) or not self._fields_ok(message):
                return False
            if message["role"] not in self.roles or not isinstance(message["content"], str):
                return False
            total += len(message["content"])
        return total <= self.max_length

    def _fields_ok(self, message: dict) -> bool:
        if set(message) == {"role", "content"}:
            return True
        if not self.tool_messages or not {"role", "content"} <= set(message):
            return False
        extra = set(message) - {"role", "content"}
        if not extra <= TOOL_MESSAGE_FIELDS:
            return False
        calls = message.get("tool_calls")
        if calls is not None and (
            message["role"] != "assistant"
            or not isinstance(calls, list)
            or not all(_is_tool_call(c) for c in calls)
        ):
            return False
        return all(isinstance(message.get(key, ""), str) for key in ("tool_call_id", "name"))

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"ChatSpace(max_length={self.max_length}, roles={self.roles})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, ChatSpace)
            and other.max_length == self.max_length
            and other.max_messages == self.max_messages
            and other.roles == self.roles
            and other.tool_messages == self.tool_messages
        )

    def __hash__(self) -> int:
        return hash((ChatSpace, self.max_length, self.max_messages, self.roles, self.tool_messages))


def _is_tool_call(call: Any) -> bool:
    function = call.get("function") if isinstance(call, dict) else None
    return (
        isinstance(function, dict)
        and isinstance(function.get("name"), str)
        and isinstance(function.get("arguments"), str | dict)
    )


class ToolSpace(Space[list]):
    """The tools a model call offers: OpenAI-style ``{"type": "function", "function": {"name":
    ..., "description": ..., "parameters": {...}}}`` definitions (what ``apply_chat_template``'s
    ``tools`` takes).

    Args:
        max_tools: Largest number of tools.
        seed: Seed for :meth:`sample`.
    """

    def __init__(self, max_tools: int = 128, *, seed: int | np.random.Generator | None = None):
        self.max_tools = int(max_tools)
        super().__init__(dtype=None, seed=seed)

    def sample(self, mask: Any = None, probability: Any = None) -> list[dict[str, Any]]:
        """One tool without parameters."""
        name = f"tool_{int(self.np_random.integers(1000))}"
        return [{"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}]

    def contains(self, x: Any) -> bool:
        return (
            isinstance(x, list)
            and len(x) <= self.max_tools
            and all(
                isinstance(t, dict)
                and t.get("type") == "function"
                and isinstance(t.get("function"), dict)
                and isinstance(t["function"].get("name"), str)
                for t in x
            )
        )

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"ToolSpace(max_tools={self.max_tools})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ToolSpace) and other.max_tools == self.max_tools

    def __hash__(self) -> int:
        return hash((ToolSpace, self.max_tools))


class ChatObservation(Dict):
    """``{"messages": ChatSpace(tool_messages=True)}``, plus ``"tools"`` (a :class:`ToolSpace`)
    in the observations of a call that offers tools.

    Args:
        max_length: The transcript's largest total number of characters.
        seed: Seed for :meth:`sample`.
    """

    def __init__(self, max_length: int = 65536, *, seed: int | None = None) -> None:
        super().__init__(
            {"messages": ChatSpace(max_length, tool_messages=True), "tools": ToolSpace()},
            seed=seed,
        )

    def contains(self, x: Any) -> bool:
        if isinstance(x, dict) and set(x) == {"messages"}:
            return bool(self.spaces["messages"].contains(x["messages"]))
        return bool(super().contains(x))
