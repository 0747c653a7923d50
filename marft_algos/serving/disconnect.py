"""A call answered unless its client goes away first.

A client that disconnects (an agent program killed, an ``openai`` timeout) no longer waits for its
reply: its call is cancelled, so that while it is still queued it is dropped
(:meth:`~marft_algos.serving.batcher.Batcher.submit`), and a call already generating has its reply
discarded when its batch ends.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import Future
from typing import Any

__all__ = ["ClientGone", "until_answered"]


class ClientGone(Exception):
    """The client disconnected before its call was answered (the call was cancelled)."""


async def until_answered(request: Any, future: Future) -> Any:
    """The result of ``future`` (a queued call), or :class:`ClientGone` once the client of
    ``request`` (a Starlette request whose body was read) disconnects first.

    Raises:
        ClientGone: The client went away; ``future`` was cancelled.
    """
    answer = asyncio.wrap_future(future)
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({answer, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
    if answer.done():
        return answer.result()
    future.cancel()  # a queued call is dropped; one generating finishes with its batch
    answer.cancel()
    raise ClientGone


async def _disconnected(request: Any) -> None:
    """Return when the ASGI server reports the client's disconnection."""
    while True:
        message = await request.receive()
        if message.get("type") == "http.disconnect":
            return
