"""Rollouts on an inference engine in a background thread: :class:`EngineRolloutThread`.

The asynchronous counterpart of :class:`~marft_algos.rollout.worker.RolloutWorker` for a rollout
backend (the vLLM engine, :mod:`marft_algos.rollout.vllm`): the engine already holds its own copy
of the weights, so no second process is needed. A thread of the trainer's process runs the jobs
(episode requests and a sampling seed) through a collector of its own, with its own env copies;
the engine's ``generate`` computes outside the Python interpreter lock for most of its time (torch
kernels in an in-process engine, the engine core's process in vLLM's multi-process mode), so the
trainer's update runs meanwhile (``docs/scaling.md``, "Asynchronous rollouts").

What the thread never does: read the policy's weights or run the policy. Adapters reach the
engine through ``backend.sync_adapters(policy, version)``, which the caller runs on the main thread
between jobs, while the engine is idle (:class:`~marft_algos.trainers.async_rollout.AsyncRollouts`
does, when it submits a job): the synced adapter files are the job's snapshot of the weights.
Every decision of a job records the version it was submitted with (``Decision.policy_version``).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from marft_algos.rollout.collector import (
    Episode,
    EpisodeRequest,
    GenerationSettings,
    RolloutCollector,
)

__all__ = ["EngineRolloutThread"]


class EngineRolloutThread:
    """A thread that runs rollout jobs on ``backend`` while the trainer updates.

    Args:
        backend: The rollout backend (``generate`` and ``sync_adapters``; see
            :class:`~marft_algos.protocols.RolloutBackend`).
        env_fn: Builds one env copy for the thread's collector.
        num_envs: Env copies stepped together.
        settings: Generation settings of the rollouts.
        seed: The collector's seed (its reset RNG; jobs give explicit requests).
    """

    pid = None
    """No process of its own (:class:`~marft_algos.rollout.worker.RolloutWorker` has one)."""

    def __init__(
        self,
        backend: Any,
        env_fn: Callable[[], Any],
        num_envs: int,
        settings: GenerationSettings | None,
        *,
        seed: int,
    ) -> None:
        self.collector = RolloutCollector.from_factory(
            backend, env_fn, num_envs, settings, seed=seed
        )
        self._jobs: queue.Queue[tuple[list[EpisodeRequest], int, int] | None] = queue.Queue()
        self._results: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._thread = threading.Thread(target=self._serve, daemon=True, name="marft-engine")
        self._thread.start()
        self.pending = 0
        """Jobs submitted and not yet read back."""
        self.seconds: float | None = None
        """Wall time the engine took for the episodes :meth:`result` returned last."""

    def _serve(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            requests, version, sampling_seed = job
            try:
                self.collector.generator.manual_seed(sampling_seed)
                started = time.perf_counter()
                episodes = self.collector.collect(requests)
                seconds = time.perf_counter() - started
                for episode in episodes:
                    for decision in episode.decisions:
                        decision.policy_version = version
                self._results.put(("episodes", (episodes, version, seconds)))
            except BaseException as exc:  # raised in the trainer's thread by result()
                self._results.put(("error", exc))

    def submit(self, requests: Sequence[EpisodeRequest], version: int, sampling_seed: int) -> None:
        """Queue a job: run ``requests`` on the engine as it is now (synced to ``version``), the
        collector's generator seeded with ``sampling_seed``."""
        if not self._thread.is_alive():
            raise RuntimeError("This EngineRolloutThread was closed; build a new one.")
        self._jobs.put((list(requests), int(version), int(sampling_seed)))
        self.pending += 1

    def result(self) -> tuple[list[Episode], int]:
        """The oldest pending job's episodes and version (blocks until they are ready); an
        exception of the job (e.g. too many failed agent programs) is raised here."""
        if not self.pending:
            raise RuntimeError("EngineRolloutThread.result() called with no job pending.")
        kind, value = self._results.get()
        self.pending -= 1
        if kind == "error":
            raise value
        episodes, version, self.seconds = value
        return episodes, version

    def close(self) -> None:
        """Stop the thread once its running job ends (an engine call cannot be interrupted);
        queued jobs are dropped. Idempotent."""
        if not self._thread.is_alive():
            return
        while True:
            try:
                self._jobs.get_nowait()
            except queue.Empty:
                break
        self._jobs.put(None)
        self._thread.join()
        self.pending = 0
        self.collector.close()
