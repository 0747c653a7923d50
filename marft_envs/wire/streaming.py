"""Server-sent events of a generated reply, as the ``openai`` client reads a stream.

Marft generates a reply whole (the ids trained on are the ids sampled, never re-tokenised), then
sends it as events: ``stream=true`` changes how the reply travels, not what it is. A piece of
text is a word with the spaces after it, and the pieces join to exactly the reply's text.

- Chat completions (:func:`chat_events`): ``chat.completion.chunk`` objects, the first with
  ``delta.role``, then the content, then each tool call whole (``delta.tool_calls[i]`` with its id,
  name and arguments), then one with ``finish_reason``; with
  ``stream_options={"include_usage": true}`` a last chunk with no choices and the ``usage``; then
  ``data: [DONE]``.
- Responses (:func:`response_events`): ``response.created``, ``response.in_progress``; for the
  message item ``response.output_item.added``, ``response.content_part.added``,
  ``response.output_text.delta`` per piece, ``response.output_text.done``,
  ``response.content_part.done``, ``response.output_item.done``; for a function call
  ``response.output_item.added``, ``response.function_call_arguments.delta`` and ``.done``,
  ``response.output_item.done``; then ``response.completed`` with the whole Response. Each event
  names its ``type`` in the ``event:`` line and in its data, numbered by ``sequence_number``.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["chat_events", "response_events", "sse", "streaming_response", "text_pieces"]

_PIECE = re.compile(r"\s+|\S+\s*")


def text_pieces(text: str) -> list[str]:
    """``text`` cut into words with their trailing spaces (leading spaces alone); ``"".join`` of
    the pieces is ``text``."""
    return _PIECE.findall(text)


def sse(data: Any, event: str | None = None) -> bytes:
    """One server-sent event: ``event: <name>`` (when named) and ``data: <json>``."""
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()


def chat_events(completion: Mapping[str, Any], include_usage: bool = False) -> Iterator[bytes]:
    """The ``chat.completion.chunk`` events of a chat completion (as a dict), ending with
    ``[DONE]``."""
    base = {
        "id": completion["id"],
        "object": "chat.completion.chunk",
        "created": completion.get("created", 0),
        "model": completion["model"],
    }
    choice = completion["choices"][0]
    message = choice["message"]

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        entry = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
        return sse({**base, "choices": [entry]})

    yield chunk({"role": "assistant", "content": None if message.get("content") is None else ""})
    for piece in text_pieces(message.get("content") or ""):
        yield chunk({"content": piece})
    for k, call in enumerate(message.get("tool_calls") or []):
        yield chunk({"tool_calls": [{"index": k, **call}]})
    yield chunk({}, choice["finish_reason"])
    if include_usage:
        yield sse({**base, "choices": [], "usage": completion["usage"]})
    yield sse("[DONE]")


def response_events(response: Mapping[str, Any]) -> Iterator[bytes]:
    """The events of a finished Response object (as a dict), from ``response.created`` to
    ``response.completed``."""
    numbers = iter(range(1 << 62))

    def event(kind: str, **fields: Any) -> bytes:
        return sse({"type": kind, "sequence_number": next(numbers), **fields}, kind)

    opening = {**response, "status": "in_progress", "output": [], "usage": None}
    yield event("response.created", response=opening)
    yield event("response.in_progress", response=opening)
    for index, item in enumerate(response["output"]):
        started = copy.deepcopy(item)
        started["status"] = "in_progress"
        where = {"item_id": item["id"], "output_index": index}
        if item["type"] == "message":
            started["content"] = []
            yield event("response.output_item.added", output_index=index, item=started)
            for part_index, part in enumerate(item["content"]):
                empty = {**part, "text": ""}
                at = {**where, "content_index": part_index}
                yield event("response.content_part.added", **at, part=empty)
                for piece in text_pieces(part["text"]):
                    yield event("response.output_text.delta", **at, delta=piece, logprobs=[])
                yield event("response.output_text.done", **at, text=part["text"], logprobs=[])
                yield event("response.content_part.done", **at, part=part)
        else:  # a function call: its arguments in one delta
            started["arguments"] = ""
            yield event("response.output_item.added", output_index=index, item=started)
            arguments = item["arguments"]
            yield event("response.function_call_arguments.delta", **where, delta=arguments)
            yield event(
                "response.function_call_arguments.done",
                **where,
                name=item["name"],
                arguments=arguments,
            )
        yield event("response.output_item.done", output_index=index, item=item)
    yield event("response.completed", response=dict(response))


def streaming_response(events: Iterator[bytes]) -> Any:
    """A Starlette response sending ``events`` as ``text/event-stream``."""
    from starlette.responses import StreamingResponse

    return StreamingResponse(
        events,
        media_type="text/event-stream",
        headers={"cache-control": "no-cache", "x-accel-buffering": "no"},
    )
