"""Ending a generation early, between two tokens, from the thread that runs it.

``with stop_when(predicate):`` around a policy's ``generate`` on one thread: :func:`decode
<marft_algos.policy.decoding.decode>` asks ``predicate()`` before each new token and, once it is
true, ends every row there (cut, ``finished`` False). ``marft serve`` stops a batch whose callers
have all disconnected, or that a shutdown no longer waits for.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

__all__ = ["stop_requested", "stop_when"]

_LOCAL = threading.local()


@contextlib.contextmanager
def stop_when(predicate: Callable[[], bool]) -> Iterator[None]:
    """Within the context, on this thread, decoding ends at the first token where
    ``predicate()`` is true."""
    previous = getattr(_LOCAL, "predicate", None)
    _LOCAL.predicate = predicate
    try:
        yield
    finally:
        _LOCAL.predicate = previous


def stop_requested() -> bool:
    """Whether this thread's generation should end now (:func:`stop_when`)."""
    predicate = getattr(_LOCAL, "predicate", None)
    return predicate is not None and bool(predicate())
