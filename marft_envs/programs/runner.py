"""One episode of an agent program, advanced one model call at a time.

The program runs until it makes a model call; the call waits there while the env schedules the
named agent and the policy generates; :meth:`ProgramRun.answer` hands the text back and the program
runs on to its next call or its end. The env only ever waits for the program's next *event* (a
call, a return, an exception), and never longer than the episode's time budget.

The time budget is the program's own time, kept by the run itself: a clock that starts with the
episode and runs, whatever the env is doing, whenever none of the program's calls waits for its
reply (model time is not counted). Every event is stamped with that clock, so an episode whose
program went past its budget fails even when the env looked at it late, and the env never waits
longer than the budget left: k programs that hang at once cost one budget, not k.

A call is queued with :meth:`ProgramRun.submit`, which never blocks: the reply is delivered to a
callback. The in-process client waits for it on a queue; the HTTP endpoint awaits it on its event
loop, so a waiting call holds no thread and any number of episodes can wait at once.

Where the program runs (``isolation``): ``"thread"``, a daemon thread of this process;
``"process"``, a child process in its own process group (:mod:`marft_envs.programs.isolation`),
killed with every process it started when the episode ends, so that neither ``os._exit``, a crash
of the interpreter nor a child it leaves behind can end or outlive the trainer.
"""

from __future__ import annotations

import queue
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from marft_envs.programs.client import CallRecord, EpisodeEnded
from marft_envs.programs.events import Event, run_program
from marft_envs.wire.protocol import RequestRefused

__all__ = ["Deliver", "Event", "ProgramRun", "run_program"]

#: Receives a call's reply, or the :class:`EpisodeEnded` that ends the wait.
Deliver = Callable[[Any], None]


@dataclass
class _Pending:
    call: CallRecord
    deliver: Deliver


class ProgramRun:
    """A program's episode, in a thread of this process or in a child process.

    Args:
        program: ``program(task, client)``, a function or an ``async def``.
        task: This episode's task.
        make_client: Builds the client from this run (its :meth:`send` and :meth:`submit`).
        time_budget: Seconds the env may wait, in total, for the program between its calls.
        isolation: ``"thread"`` or ``"process"`` (see the module notes).
        max_pending: Calls that may wait for their replies at once (None: no bound); one more is
            refused with :class:`~marft_envs.wire.RequestRefused` (HTTP 429) and
            recorded as a refusal.
        check: Called with each call before it is queued (the prompt bound); the
            :class:`~marft_envs.wire.RequestRefused` it raises is recorded as a refusal.
    """

    def __init__(
        self,
        program: Callable[..., Any],
        task: Any,
        make_client: Callable[[ProgramRun], Any],
        time_budget: float,
        *,
        isolation: str = "thread",
        max_pending: int | None = None,
        check: Callable[[CallRecord], None] | None = None,
    ) -> None:
        self._check = check
        self._events: queue.Queue[Event] = queue.Queue()
        self._pending: deque[_Pending] = deque()
        self._lock = threading.Lock()
        self._closed = False
        self._budget = float(time_budget)
        self._used = 0.0  # program time of the spans that ended (no call waiting)
        self._running_since: float | None = time.monotonic()  # None while a call waits
        self._max_pending = max_pending
        self.finished = False
        self.last_call: CallRecord | None = None
        #: Requests refused for passing a bound, as ``(kind, message)``: the episode is failed.
        self.refusals: list[tuple[str, str]] = []
        self.client = make_client(self)
        self._child: Any = None
        if isolation == "process":
            from marft_envs.programs.isolation import ChildProgram

            self._child = ChildProgram(program, task, self)
        else:
            threading.Thread(
                target=self._main, args=(program, task), name="marft-program", daemon=True
            ).start()

    # ------------------------------------------------------------------ program side
    def _main(self, program: Callable[..., Any], task: Any) -> None:
        try:
            self.ended(Event("return", value=run_program(program, task, self.client)))
        except BaseException as exc:  # the program's own failure ends its episode, not the run
            self.ended(Event("error", error=exc, traceback=traceback.format_exc()))

    def ended(self, event: Event) -> None:
        """The program returned or failed (called from wherever it runs)."""
        with self._lock:
            event.at = self._program_time()
            self._running_since = None
        self._events.put(event)

    def _program_time(self) -> float:
        """Seconds the program has run this episode with no call waiting (under the lock)."""
        since = self._running_since
        return self._used + (time.monotonic() - since if since is not None else 0.0)

    def refused(self, kind: str, message: str) -> None:
        """A request of the program passed a bound (:class:`~marft_envs.wire.RequestLimits`)."""
        with self._lock:
            self.refusals.append((kind, message))

    def submit(self, call: CallRecord, deliver: Deliver) -> None:
        """Queue a call without waiting; ``deliver`` later gets its reply, or an
        :class:`EpisodeEnded` when the episode ends first.

        Raises:
            EpisodeEnded: The episode has already ended.
            RequestRefused: ``max_pending`` calls already wait, or ``check`` refused the call.
        """
        if self._check is not None:
            try:
                self._check(call)
            except RequestRefused as err:
                if err.kind is not None:
                    self.refused(err.kind, str(err))
                raise
        with self._lock:
            if self._closed:
                raise EpisodeEnded(
                    f"call {call.index} for {call.agent!r} arrived after the episode ended (its time "
                    f"budget or call budget ran out, or the env was reset or closed)."
                )
            if self._max_pending is not None and len(self._pending) >= self._max_pending:
                refusal = RequestRefused(
                    f"this episode already has {len(self._pending)} calls waiting, the most "
                    f"max_concurrent_calls={self._max_pending} allows; wait for one to finish.",
                    status=429,
                    code="too_many_calls",
                    kind="TooManyCalls",
                    error_type="rate_limit_error",
                )
                self.refusals.append(("TooManyCalls", str(refusal)))
                raise refusal
            at = self._program_time()
            if self._running_since is not None:  # the clock stops while a call waits
                self._used, self._running_since = at, None
            self._pending.append(_Pending(call, deliver))
        self._events.put(Event("call", call=call, at=at))

    def send(self, call: CallRecord) -> Any:
        """Queue a call and wait for its reply (the in-process client's path)."""
        box: queue.Queue[Any] = queue.Queue(maxsize=1)
        self.submit(call, box.put)
        answer = box.get()
        if isinstance(answer, EpisodeEnded):
            raise answer
        return answer

    # ------------------------------------------------------------------ env side
    def next_event(self) -> Event:
        """The program's next call, return or exception; a timeout when the program's time went
        past the budget before it (waiting at most the budget it has left)."""
        with self._lock:
            left = self._budget - self._program_time()
        try:
            event = self._events.get(timeout=max(left, 0.0))
        except queue.Empty:
            event = Event("timeout")
        if event.at > self._budget:  # the program passed its budget before this event
            event = Event("timeout")
        if event.kind == "call":
            self.last_call = event.call
        else:
            self.finished = True
        return event

    def answer(self, reply: Any) -> None:
        """Hand the reply to the oldest waiting call."""
        with self._lock:
            pending = self._pending.popleft()
            if not self._pending and not self._closed:  # the program runs again: its clock too
                self._running_since = time.monotonic()
        pending.deliver(reply)

    def close(self) -> None:
        """End the episode: every waiting call, and every later one, gets :class:`EpisodeEnded`;
        a program in a child process is killed with its process group."""
        with self._lock:
            self._closed = True
            waiting = list(self._pending)
            self._pending.clear()
        for pending in waiting:
            pending.deliver(
                EpisodeEnded(
                    f"the episode ended while call {pending.call.index} for "
                    f"{pending.call.agent!r} waited."
                )
            )
        if self._child is not None:
            self._child.kill()
