"""A wall-clock limit for symbolic work that runs in any thread.

``signal.setitimer`` interrupts pure-Python code promptly but only works in the main thread, and
only when nobody else owns ``SIGALRM``. Rollout workers grade from worker threads, so the fallback
is a watchdog thread that raises :class:`GradingTimeout` inside the guarded thread through
``PyThreadState_SetAsyncExc``. Both mechanisms keep re-raising every 50 ms until the guarded block
exits, because library code (sympy included) sometimes swallows exceptions.

Neither mechanism can interrupt one long C call (a gigantic integer power, say); the parser refuses
such inputs before they reach sympy (see :mod:`marft_envs.math.grading.latex`).
"""

from __future__ import annotations

import ctypes
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["GradingTimeout", "time_limit"]

_RETRY_S = 0.05


class GradingTimeout(BaseException):
    """Raised inside a :func:`time_limit` block that ran past its deadline.

    It derives from ``BaseException`` so that ``except Exception`` blocks inside sympy do not
    swallow it.
    """


def _alarm_available() -> bool:
    if (
        not hasattr(signal, "setitimer")
        or threading.current_thread() is not threading.main_thread()
    ):
        return False  # no SIGALRM on Windows; signals are delivered to the main thread only
    if signal.getsignal(signal.SIGALRM) not in (signal.SIG_DFL, signal.SIG_IGN, None):
        return False  # someone else's handler (or an enclosing time_limit) owns the alarm
    return signal.getitimer(signal.ITIMER_REAL)[0] == 0.0


def _raise_timeout(signum: int, frame: object) -> None:
    raise GradingTimeout


@contextmanager
def _alarm_limit(seconds: float) -> Iterator[None]:
    previous = signal.signal(signal.SIGALRM, _raise_timeout)
    signal.setitimer(signal.ITIMER_REAL, seconds, _RETRY_S)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0.0)
        signal.signal(signal.SIGALRM, previous)


def _set_async_exc(thread_id: int, exc: type[BaseException] | None) -> None:
    # Passing None clears an exception that was scheduled but not raised yet.
    obj = ctypes.py_object(exc) if exc is not None else None
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), obj)


@contextmanager
def _watchdog_limit(seconds: float) -> Iterator[None]:
    target = threading.get_ident()
    lock = threading.Lock()
    done = threading.Event()
    armed = [True]

    def watch() -> None:
        if done.wait(seconds):
            return
        while True:
            with lock:
                if not armed[0]:
                    return
                _set_async_exc(target, GradingTimeout)
            if done.wait(_RETRY_S):
                return

    watcher = threading.Thread(target=watch, name="grading-timeout", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        with lock:
            armed[0] = False
        done.set()
        # The watchdog may have scheduled an exception that has not surfaced yet; once disarmed
        # it cannot schedule another, so clearing here leaves nothing to leak into later code.
        _set_async_exc(target, None)


@contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """Raise :class:`GradingTimeout` in the calling thread once ``seconds`` have passed.

    Args:
        seconds: The limit; ``None`` or a non-positive value disables it.

    Yields:
        Nothing; the body of the ``with`` block runs under the limit.
    """
    if seconds is None or seconds <= 0:
        yield
        return
    guard = _alarm_limit if _alarm_available() else _watchdog_limit
    with guard(seconds):
        yield
