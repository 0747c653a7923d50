"""A wall-clock limit for symbolic work that runs in any thread, raised only where it is safe.

Earlier versions raised the time-out from outside the guarded code: ``SIGALRM`` in the main thread
and ``PyThreadState_SetAsyncExc`` from a watchdog in worker threads. Both land at an arbitrary
bytecode, so under concurrency a time-out could fire inside the import machinery (leaving a module
lock held: the next thread importing that sympy module waited forever) or while the thread ran
finaliser code (printed as "Exception ignored in thread ..."), and a signal handler belongs to the
whole process, not to one grading call.

Here the guarded thread checks its own deadline. :func:`time_limit` installs a trace function for
the calling thread only (``sys.settrace``): it runs at every Python function call, and, once a
shared watcher thread has marked the running frames at the deadline, at every line of them (so a
long loop without calls is caught too). Past the deadline it raises :class:`GradingTimeout`
*synchronously, in that thread*, at a safe point: in a function of sympy, mpmath or the grader,
never inside the standard library (imports, locks, logging), a ``__del__``, an ``__exit__`` or a
generator's own frame (which the garbage collector may be closing), and never while an import is
running in that thread. Library code that swallows the exception is
interrupted again every 50 ms until the guarded block exits. The watcher only sets frame
attributes and never raises; no signal is used, so concurrent calls in threads and processes each
keep their own bound (a forked child starts its own watcher).

Neither this nor any in-process mechanism can interrupt one long C call (a gigantic integer power,
say); the parser refuses such inputs before they reach sympy (see
:mod:`marft_envs.math.grading.latex`). While a block runs, an enclosing debugger's or coverage
tool's trace function is paused for that thread and restored afterwards.
"""

from __future__ import annotations

import heapq
import inspect
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

__all__ = ["GradingTimeout", "time_limit"]

_RETRY_S = 0.05
_UNSAFE_NAMES = frozenset({"__del__", "__exit__", "__aexit__", "__enter__", "__aenter__"})
# Generator and coroutine frames: their resumption may be a close (GeneratorExit thrown in by the
# garbage collector), where a raised time-out reaches no caller and is printed as "Exception
# ignored". Their loops are still interrupted at the calls they make and in the frame consuming them.
_RESUMABLE = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR


def _package_dir(module_name: str) -> str | None:
    module = sys.modules.get(module_name)
    path = getattr(module, "__file__", None)
    return os.path.dirname(path) + os.sep if path else None


_GRADER_DIR = os.path.dirname(__file__) + os.sep


class GradingTimeout(BaseException):
    """Raised inside a :func:`time_limit` block that ran past its deadline.

    It derives from ``BaseException`` so that ``except Exception`` blocks inside sympy do not
    swallow it.
    """


class _Limit:
    """The state of one thread's active limit (held by the thread's trace function)."""

    def __init__(self, deadline: float, previous: _Limit | None) -> None:
        self.deadline: float = deadline if previous is None else min(deadline, previous.deadline)
        self.next_raise = self.deadline
        self.previous = previous
        self.thread_id = threading.get_ident()
        self.active = True
        self.roots: tuple[str, ...] = tuple(
            d for d in (_GRADER_DIR, _package_dir("sympy"), _package_dir("mpmath")) if d
        )
        monotonic = time.monotonic

        def trace(frame: FrameType, event: str, arg: Any) -> Any:
            # Called at every Python call of the guarded thread: keep the common case cheap.
            if monotonic() >= self.next_raise and self.due(frame):
                self.raise_timeout()
            return None

        self.trace = trace

    def due(self, frame: FrameType) -> bool:
        now = time.monotonic()
        code = frame.f_code
        if now < self.next_raise or code.co_name in _UNSAFE_NAMES or code.co_flags & _RESUMABLE:
            return False
        code_file = frame.f_code.co_filename
        if not code_file.startswith(self.roots) or code_file == __file__:
            return False  # the standard library (locks, imports, logging) is never interrupted
        if _active.__dict__.get("limit") is not self:
            return False  # the block has ended (or an inner one runs): not ours to stop
        f: FrameType | None = frame.f_back
        while f is not None:
            if f.f_code.co_filename.startswith("<frozen importlib"):
                return False  # an import in progress: its module locks must be released first
            f = f.f_back
        self.next_raise = now + _RETRY_S  # let the unwinding (finally blocks) run first
        return True

    def trace_lines(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line" and self.due(frame):
            self.raise_timeout()
        return self.trace_lines

    def mark_frames(self) -> None:
        """Past the deadline (from the watcher thread): trace the running frames line by line.

        A long loop without function calls (sympy's multinomial expansion) sees no call event;
        with its frame's ``f_trace`` set, the guarded thread itself raises at the next line.
        Only an attribute is set here; nothing is raised from the watcher.
        """
        frame = sys._current_frames().get(self.thread_id)
        while frame is not None and self.active:
            code_file = frame.f_code.co_filename
            if code_file.startswith(self.roots) and code_file != __file__:
                frame.f_trace = self.trace_lines
            frame = frame.f_back

    def raise_timeout(self) -> None:
        # CPython switches tracing off in a thread whose trace function raises; the profile hook
        # (called at the next call or return) switches it back on, so a swallowed time-out is
        # raised again.
        sys.setprofile(self.rearm)
        raise GradingTimeout

    def rearm(self, frame: FrameType, event: str, arg: Any) -> None:
        sys.setprofile(None)
        if _active.__dict__.get("limit") is self:
            sys.settrace(self.trace)


class _Watcher:
    """One daemon thread per process that marks the frames of limits past their deadline (and
    again every 50 ms until their block ends); cheaper than a timer thread per call."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        # Also the fork hook: a child starts without the parent's thread and with fresh locks.
        self.cond = threading.Condition()
        self.heap: list[tuple[float, int, _Limit]] = []
        self.count = 0
        self.thread: threading.Thread | None = None

    def add(self, limit: _Limit) -> None:
        with self.cond:
            self.count += 1
            heapq.heappush(self.heap, (limit.deadline, self.count, limit))
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(
                    target=self.run, name="grading-time-limit", daemon=True
                )
                self.thread.start()
            self.cond.notify()

    def run(self) -> None:
        while True:
            with self.cond:
                while self.heap and not self.heap[0][2].active:
                    heapq.heappop(self.heap)  # blocks that ended in time
                if not self.heap:
                    self.cond.wait()
                    continue
                when, _, limit = self.heap[0]
                wait = when - time.monotonic()
                if wait > 0:
                    self.cond.wait(wait)
                    continue
                heapq.heappop(self.heap)
                self.count += 1
                heapq.heappush(self.heap, (time.monotonic() + _RETRY_S, self.count, limit))
            limit.mark_frames()


_WATCHER = _Watcher()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_WATCHER.reset)

_active = threading.local()


@contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """Raise :class:`GradingTimeout` in the calling thread once ``seconds`` have passed.

    Works in any thread and any process; nested limits keep the earlier deadline.

    Args:
        seconds: The limit; ``None`` or a non-positive value disables it.

    Yields:
        Nothing; the body of the ``with`` block runs under the limit.
    """
    if seconds is None or seconds <= 0:
        yield
        return
    outer: _Limit | None = getattr(_active, "limit", None)
    limit = _Limit(time.monotonic() + seconds, outer)
    previous_trace = sys.gettrace()
    previous_profile = sys.getprofile()
    _active.limit = limit
    sys.settrace(limit.trace)
    _WATCHER.add(limit)
    try:
        yield
    finally:
        limit.active = False  # first: the watcher marks no frame of this thread from now on
        _active.limit = outer
        sys.settrace(previous_trace)
        if sys.getprofile() == limit.rearm:
            sys.setprofile(previous_profile)
