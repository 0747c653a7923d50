"""A wall-clock limit for symbolic work that runs in any thread, raised only where it is safe.

Earlier versions raised the time-out from outside the guarded code: ``SIGALRM`` in the main thread
and ``PyThreadState_SetAsyncExc`` from a watchdog in worker threads. Both land at an arbitrary
bytecode, so under concurrency a time-out could fire inside the import machinery (leaving a module
lock held: the next thread importing that sympy module waited forever) or while the thread ran
finaliser code (printed as "Exception ignored in thread ..."), and a signal handler belongs to the
whole process, not to one grading call.

Here the guarded thread checks its own deadline. :func:`time_limit` installs a trace function for
the calling thread only (``sys.settrace``): it runs at every Python function call, and at every line
of the grader's own modules, and once the deadline has passed it raises :class:`GradingTimeout`
*synchronously, in that thread*, at a safe point: at the entry of a function of sympy, mpmath or the
grader, never inside the standard library (imports, locks, logging), a ``__del__`` or an
``__exit__``, and never while an import is running in that thread. Library code that swallows the
exception is interrupted again every 50 ms until the guarded block exits. Nothing is shared between
threads or processes, so concurrent calls each keep their own bound.

Neither this nor any in-process mechanism can interrupt one long C call (a gigantic integer power,
say); the parser refuses such inputs before they reach sympy (see
:mod:`marft_envs.math.grading.latex`). While a block runs, an enclosing debugger's or coverage
tool's trace function is paused for that thread and restored afterwards.
"""

from __future__ import annotations

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
        self.roots: tuple[str, ...] = tuple(
            d for d in (_GRADER_DIR, _package_dir("sympy"), _package_dir("mpmath")) if d
        )

    def due(self, frame: FrameType) -> bool:
        now = time.monotonic()
        if now < self.next_raise or frame.f_code.co_name in _UNSAFE_NAMES:
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

    def trace(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event == "call" and self.due(frame):
            self.raise_timeout()
        if frame.f_code.co_filename.startswith(_GRADER_DIR):
            return self.trace_lines  # the grader's own loops are bounded line by line
        return None

    def trace_lines(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line" and self.due(frame):
            self.raise_timeout()
        return self.trace_lines

    def mark_frames(self, thread_id: int) -> None:
        """At the deadline (from the watcher thread): trace the running frames line by line.

        A long loop without function calls (sympy's multinomial expansion) sees no call event;
        with its frame's ``f_trace`` set, the guarded thread itself raises at the next line.
        Only an attribute is set here; nothing is raised from this thread.
        """
        frame = sys._current_frames().get(thread_id)
        while frame is not None:
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
        if _active.limit is self:
            sys.settrace(self.trace)


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
    watcher = threading.Timer(seconds, limit.mark_frames, args=(threading.get_ident(),))
    watcher.daemon = True
    _active.limit = limit
    sys.settrace(limit.trace)
    watcher.start()
    try:
        yield
    finally:
        watcher.cancel()
        _active.limit = outer
        sys.settrace(previous_trace)
        if sys.getprofile() == limit.rearm:
            sys.setprofile(previous_profile)
