"""One episode of an agent program, run in its own thread and advanced one model call at a time.

The program runs until it makes a model call; the call waits there while the env schedules the
named agent and the policy generates; :meth:`ProgramRun.answer` hands the text back and the program
runs on to its next call or its end. The env only ever waits for the program's next *event* (a
call, a return, an exception), and never longer than the episode's time budget.
"""

from __future__ import annotations

import asyncio
import inspect
import queue
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from marft_envs.programs.client import CallRecord, EpisodeEnded

__all__ = ["Event", "ProgramRun"]

_CLOSED = object()


@dataclass
class Event:
    """What the program did next: ``kind`` is ``"call"``, ``"return"``, ``"error"`` or ``"timeout"``."""

    kind: str
    call: CallRecord | None = None
    value: Any = None
    error: BaseException | None = None
    traceback: str = ""


@dataclass
class _Pending:
    call: CallRecord
    reply: queue.Queue[Any]


class ProgramRun:
    """A program's episode in a daemon thread.

    Args:
        program: ``program(task, client)``, a function or an ``async def``.
        task: This episode's task.
        make_client: Builds the client from the function that sends a call to the env.
        time_budget: Seconds the env may wait, in total, for the program between its calls.
    """

    def __init__(
        self,
        program: Callable[..., Any],
        task: Any,
        make_client: Callable[[Callable[[CallRecord], Any]], Any],
        time_budget: float,
    ) -> None:
        self._events: queue.Queue[Event] = queue.Queue()
        self._pending: deque[_Pending] = deque()
        self._lock = threading.Lock()
        self._closed = False
        self._budget = float(time_budget)
        self.client = make_client(self._send)
        self.finished = False
        self.last_call: CallRecord | None = None
        self._thread = threading.Thread(
            target=self._main, args=(program, task), name="marft-program", daemon=True
        )
        self._thread.start()

    # ------------------------------------------------------------------ program thread
    def _main(self, program: Callable[..., Any], task: Any) -> None:
        try:
            result = program(task, self.client)
            if inspect.isawaitable(result):
                result = asyncio.run(_awaited(result))
            self._events.put(Event("return", value=result))
        except BaseException as exc:  # the program's own failure ends its episode, not the run
            self._events.put(Event("error", error=exc, traceback=traceback.format_exc()))

    def _send(self, call: CallRecord) -> Any:
        reply: queue.Queue[Any] = queue.Queue(maxsize=1)
        with self._lock:
            if self._closed:
                raise EpisodeEnded(
                    f"call {call.index} for {call.agent!r} arrived after the episode ended (its time "
                    f"budget or call budget ran out, or the env was reset or closed)."
                )
            self._pending.append(_Pending(call, reply))
        self._events.put(Event("call", call=call))
        answer = reply.get()
        if answer is _CLOSED:
            raise EpisodeEnded(
                f"the episode ended while call {call.index} for {call.agent!r} waited."
            )
        return answer

    # ------------------------------------------------------------------ env side
    def next_event(self) -> Event:
        """Wait for the program's next call, return or exception (a timeout past the budget)."""
        start = time.perf_counter()
        try:
            event = self._events.get(timeout=max(self._budget, 0.0))
        except queue.Empty:
            event = Event("timeout")
        self._budget -= time.perf_counter() - start
        if event.kind == "call":
            self.last_call = event.call
        else:
            self.finished = True
        return event

    def answer(self, reply: Any) -> None:
        """Hand the reply to the oldest waiting call."""
        with self._lock:
            pending = self._pending.popleft()
        pending.reply.put(reply)

    def close(self) -> None:
        """End the episode: every waiting call, and every later one, raises :class:`EpisodeEnded`."""
        with self._lock:
            self._closed = True
            waiting = list(self._pending)
            self._pending.clear()
        for pending in waiting:
            pending.reply.put(_CLOSED)


async def _awaited(awaitable: Any) -> Any:
    return await awaitable
