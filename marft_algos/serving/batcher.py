"""One model, many concurrent requests: calls are queued per agent and generated a batch at a time.

The policy generates one batch at a time (one model, one device). Each agent has a queue of its
own, and a single worker thread takes the agents' queues in turn (round-robin): one batch of the
agent whose turn it is (up to ``max_batch`` of its oldest calls with the same settings), then the
next agent with calls waiting. A lone call waits for nothing: batching comes only from calls that
arrive while the model is busy.

Fairness bound: a call of an agent with no other call queued starts generating after at most the
batch in progress and one batch of each other agent, i.e. within ``n_agents`` batches (each at
most its agent's ``max_new_tokens``), however long another agent's queue is. A call behind ``k``
calls of its own agent waits at most ``ceil((k + 1) / max_batch)`` such rounds.

Cancelling a call's future (a client that disconnected) drops it while it is queued; once every
call of the batch generating was cancelled, the batch stops at its next token (for a policy that
decodes with :func:`~marft_algos.policy.decoding.decode`; another finishes the batch and its
replies are discarded). :meth:`Batcher.close` answers queued calls at once and gives the batch in
progress ``timeout`` seconds, then stops it the same way and answers its calls.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from typing import Any

from marft_algos.policy.stopping import stop_when
from marft_algos.protocols import GenerationSettings

__all__ = ["Batcher", "BatcherClosed"]

logger = logging.getLogger(__name__)

#: Seconds past a stop's deadline the batch in progress may take to reach its next token.
_STOP_GRACE = 2.0

#: ``generate(agent, observations, settings)`` -> one generation per observation, in order.
GenerateFn = Callable[[str, Sequence[Any], GenerationSettings], Sequence[Any]]


class BatcherClosed(RuntimeError):
    """A call reached a batcher that is shutting down, or was still waiting when it shut down."""


class _CallFuture(Future):
    """A call's future; :meth:`cancel` on a call already generating records that its caller left
    (``left``), so that a batch whose callers all left can stop."""

    left = False

    def cancel(self) -> bool:
        self.left = True
        return super().cancel()


@dataclass
class _Call:
    agent: str
    observation: Any
    settings: GenerationSettings
    key: Any
    future: _CallFuture = field(default_factory=_CallFuture)


class Batcher:
    """Queue calls from any thread; one worker thread generates them in per-agent batches, the
    agents taking turns (see the module notes for the bound this gives).

    Args:
        generate: ``generate(agent, observations, settings)``, e.g. a policy's ``generate``.
        max_batch: Most prompts of one ``generate`` call.
    """

    def __init__(self, generate: GenerateFn, max_batch: int = 8) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}.")
        self._generate = generate
        self.max_batch = max_batch
        self._ready = threading.Condition()
        self._queues: dict[str, deque[_Call]] = {}  # agent -> its calls, oldest first
        self._turns: deque[str] = deque()  # agents with calls queued, in the order they go next
        self._running: list[_Call] = []
        self._closed = False
        self._deadline: float | None = None  # set by close(): the batch in progress stops then
        self._cut = False  # the batch in progress was stopped by close()
        self.batches = 0  # generate calls made (for tests and logs)
        #: Agent of each batch, in the order they were generated (for tests and logs).
        self.order: list[str] = []
        self._worker = threading.Thread(target=self._run, name="marft-serve-batcher", daemon=True)
        self._worker.start()

    def submit(
        self, agent: str, observation: Any, settings: GenerationSettings, key: Any = None
    ) -> Future:
        """Queue one call; the future resolves to its generation (or the error of its batch).
        Cancel the future to drop the call while it is still queued.

        Calls are batched together only when ``agent``, ``settings`` and ``key`` are equal (pass
        a unique ``key`` for a call that must run alone, e.g. one with its own seed).
        """
        call = _Call(agent, observation, settings, (agent, _settings_key(settings), key))
        with self._ready:
            if self._closed:
                raise BatcherClosed("the server is shutting down; retry on another replica.")
            queue = self._queues.setdefault(agent, deque())
            if not queue:
                self._turns.append(agent)
            queue.append(call)
            self._ready.notify()
        return call.future

    def close(self, timeout: float = 30.0) -> None:
        """Take no more calls, answer the queued ones with :class:`BatcherClosed` now, and give
        the batch in progress ``timeout`` seconds to finish; past it, its calls are answered
        :class:`BatcherClosed` too (the worker thread, a daemon, is left to end with its batch)."""
        with self._ready:
            first = not self._closed
            self._closed = True
            if first:
                self._deadline = time.monotonic() + timeout
            queued = [c for q in self._queues.values() for c in q]
            self._queues.clear()
            self._turns.clear()
            self._ready.notify_all()
        if first:
            _fail(queued, "the server shut down before this call ran.")
        self._worker.join(timeout + _STOP_GRACE)
        with self._ready:
            running = list(self._running)
        _fail(running, "the server shut down while this call was generating.")

    def waiting(self) -> int:
        """Calls queued and not cancelled."""
        with self._ready:
            return sum(not c.future.cancelled() for q in self._queues.values() for c in q)

    def generating(self) -> bool:
        """Whether a batch is generating."""
        with self._ready:
            return bool(self._running)

    @property
    def running(self) -> bool:
        """Whether the batcher takes calls (its worker is alive and it was not closed)."""
        return self._worker.is_alive() and not self._closed

    # ------------------------------------------------------------------ worker
    def _run(self) -> None:
        while True:
            batch = self._next_batch()
            if batch is None:
                return
            self._run_batch(batch)
            with self._ready:
                self._running = []

    def _next_batch(self) -> list[_Call] | None:
        """The next agent's oldest calls of one key (cancelled calls dropped); None once closed."""
        with self._ready:
            while True:
                if self._closed:
                    return None
                if not self._turns:
                    self._ready.wait()
                    continue
                agent = self._turns.popleft()
                queue = self._queues[agent]
                live = [c for c in queue if not c.future.cancelled()]
                batch = [c for c in live if c.key == live[0].key][: self.max_batch] if live else []
                taken = {id(c) for c in batch}
                rest = deque(c for c in live if id(c) not in taken)
                if rest:
                    self._queues[agent] = rest
                    self._turns.append(agent)  # its next batch after every other agent's turn
                else:
                    del self._queues[agent]
                if batch:
                    self._running = batch
                    return batch

    def _stop_batch(self) -> bool:
        """Whether the batch in progress should stop: every caller left, or a stop's deadline
        passed (read between two tokens, on the worker thread)."""
        deadline = self._deadline
        if deadline is not None and time.monotonic() > deadline:
            self._cut = True
            return True
        return all(c.future.left for c in self._running)

    def _run_batch(self, batch: list[_Call]) -> None:
        live = [c for c in batch if c.future.set_running_or_notify_cancel()]
        if not live:
            return
        try:
            with stop_when(self._stop_batch):
                generations = list(
                    self._generate(live[0].agent, [c.observation for c in live], live[0].settings)
                )
            self.batches += 1
            self.order.append(live[0].agent)
        except Exception as err:  # each caller gets the error of its batch
            logger.exception("generation failed for agent %r", live[0].agent)
            for call in live:
                _settle(call.future, error=err)
            return
        if self._cut:  # cut short by a stop: an error, not a reply that looks finished
            _fail(live, "the server shut down while this call was generating.")
            return
        for call, generation in zip(live, generations, strict=True):
            _settle(call.future, result=generation)


def _settle(future: Future, *, result: Any = None, error: BaseException | None = None) -> None:
    """Resolve ``future`` unless :meth:`Batcher.close` already answered it."""
    try:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
    except InvalidStateError:  # answered at shutdown
        pass


def _fail(calls: Sequence[_Call], message: str) -> None:
    for call in calls:
        if not call.future.done():
            _settle(call.future, error=BatcherClosed(message))


def _settings_key(settings: GenerationSettings) -> tuple[Any, ...]:
    caps = tuple(sorted((settings.max_new_tokens_per_agent or {}).items()))
    return (
        settings.max_new_tokens,
        settings.temperature,
        settings.top_p,
        settings.top_k,
        settings.do_sample,
        caps,
        settings.seed,
    )
