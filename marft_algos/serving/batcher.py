"""One model, many concurrent requests: calls are queued and generated a batch at a time.

The policy generates one batch at a time (one model, one device). A single worker thread takes
every call that arrived while the previous batch was generating, groups those of the same agent
and settings, and makes one ``generate`` call per group (at most ``max_batch`` prompts each), in
the order the groups' first calls arrived. A lone call waits for nothing: batching comes only from
calls that arrive while the model is busy.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from marft_algos.protocols import GenerationSettings

__all__ = ["Batcher", "BatcherClosed"]

logger = logging.getLogger(__name__)

#: ``generate(agent, observations, settings)`` -> one generation per observation, in order.
GenerateFn = Callable[[str, Sequence[Any], GenerationSettings], Sequence[Any]]


class BatcherClosed(RuntimeError):
    """A call reached a batcher that is shutting down."""


@dataclass
class _Call:
    agent: str
    observation: Any
    settings: GenerationSettings
    key: Any
    future: Future = field(default_factory=Future)


class Batcher:
    """Queue calls from any thread; one worker thread generates them in per-agent batches.

    Args:
        generate: ``generate(agent, observations, settings)``, e.g. a policy's ``generate``.
        max_batch: Most prompts of one ``generate`` call.
    """

    def __init__(self, generate: GenerateFn, max_batch: int = 8) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}.")
        self._generate = generate
        self.max_batch = max_batch
        self._queue: queue.Queue[_Call | None] = queue.Queue()
        self._closed = threading.Event()
        self.batches = 0  # generate calls made (for tests and logs)
        self._worker = threading.Thread(target=self._run, name="marft-serve-batcher", daemon=True)
        self._worker.start()

    def submit(
        self, agent: str, observation: Any, settings: GenerationSettings, key: Any = None
    ) -> Future:
        """Queue one call; the future resolves to its generation (or the error of its batch).

        Calls are batched together only when ``agent``, ``settings`` and ``key`` are equal (pass
        a unique ``key`` for a call that must run alone, e.g. one with its own seed).
        """
        if self._closed.is_set():
            raise BatcherClosed("the server is shutting down; retry on another replica.")
        call = _Call(agent, observation, settings, (agent, _settings_key(settings), key))
        self._queue.put(call)
        return call.future

    def close(self, timeout: float = 30.0) -> None:
        """Finish the batch in progress, fail the calls still queued, and end the worker."""
        if self._closed.is_set():
            return
        self._closed.set()
        self._queue.put(None)
        self._worker.join(timeout)
        while True:
            try:
                call = self._queue.get_nowait()
            except queue.Empty:
                break
            if call is not None and not call.future.done():
                call.future.set_exception(
                    BatcherClosed("the server shut down before this call ran.")
                )

    @property
    def running(self) -> bool:
        """Whether the worker thread is alive."""
        return self._worker.is_alive()

    # ------------------------------------------------------------------ worker
    def _run(self) -> None:
        while not self._closed.is_set():
            first = self._queue.get()
            if first is None:
                break
            pending = [first]
            while True:  # everything that arrived while the last batch generated
                try:
                    call = self._queue.get_nowait()
                except queue.Empty:
                    break
                if call is None:
                    self._closed.set()
                    break
                pending.append(call)
            for group in _groups(pending, self.max_batch):
                self._run_group(group)
        for call in self._drain():
            call.future.set_exception(BatcherClosed("the server shut down before this call ran."))

    def _drain(self) -> list[_Call]:
        out: list[_Call] = []
        while True:
            try:
                call = self._queue.get_nowait()
            except queue.Empty:
                return out
            if call is not None:
                out.append(call)

    def _run_group(self, group: list[_Call]) -> None:
        live = [c for c in group if c.future.set_running_or_notify_cancel()]
        if not live:
            return
        try:
            generations = list(
                self._generate(live[0].agent, [c.observation for c in live], live[0].settings)
            )
            self.batches += 1
        except Exception as err:  # each caller gets the error of its batch
            logger.exception("generation failed for agent %r", live[0].agent)
            for call in live:
                call.future.set_exception(err)
            return
        for call, generation in zip(live, generations, strict=True):
            call.future.set_result(generation)


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


def _groups(calls: Sequence[_Call], max_batch: int) -> list[list[_Call]]:
    """Calls grouped by key (first arrival first), each group cut into batches of ``max_batch``."""
    by_key: dict[Any, list[_Call]] = {}
    for call in calls:
        by_key.setdefault(call.key, []).append(call)
    return [
        group[i : i + max_batch]
        for group in by_key.values()
        for i in range(0, len(group), max_batch)
    ]
