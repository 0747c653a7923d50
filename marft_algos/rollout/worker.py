"""Rollouts in a process of their own: :class:`RolloutWorker`.

The worker is a ``spawn``-ed process holding its own copy of the policy (base model and adapters,
pickled once at start) and its own env copies. The trainer submits a job — the episode requests,
the adapters' weights and their version — and reads back the finished episodes later, so the
rollout of the next iteration runs on another core while the trainer updates on this one
(:mod:`marft_algos.trainers.async_rollout`). Every decision of a job records the version that
sampled it (``Decision.policy_version``).

Failure handling: an exception in the worker comes back with its traceback and is raised by
:meth:`RolloutWorker.result` as :class:`RolloutWorkerError` (too many failed agent programs as
the collector's own :class:`~marft_algos.rollout.collector.ProgramFailures`); a worker that dies
(killed, out of memory) is noticed within a second and raised the same way. The worker exits by itself when the
trainer's process disappears (even killed with SIGKILL), so no process is left behind.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import sys
import threading
import time
import traceback
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from marft_algos.rollout.collector import (
    Episode,
    EpisodeRequest,
    GenerationSettings,
    ProgramFailures,
)

__all__ = ["RolloutWorker", "RolloutWorkerError"]

_POLL_S = 0.5
"""How often a waiting side checks that the other one is alive."""


class RolloutWorkerError(RuntimeError):
    """The rollout worker failed or died; the message has its error."""


def adapter_weights(policy: Any, agents: Sequence[str]) -> dict[str, list[np.ndarray]]:
    """Copies of the trainable adapter weights of ``agents`` (what a job sends to the worker)."""
    return {
        agent: [p.detach().cpu().numpy().copy() for p in policy.trainable_parameters(agent)]
        for agent in agents
    }


def _load_adapter_weights(policy: Any, weights: Mapping[str, list[np.ndarray]]) -> None:
    with torch.no_grad():
        for agent, arrays in weights.items():
            params = policy.trainable_parameters(agent)
            for p, array in zip(params, arrays, strict=True):
                p.copy_(torch.from_numpy(array).to(p.device, p.dtype))


def _exit_with_parent(parent: int) -> None:
    """End this process when ``parent`` is gone (a SIGKILL of the trainer included)."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            import ctypes

            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG

    def watch() -> None:
        while True:
            if os.getppid() != parent:
                os._exit(1)
            time.sleep(_POLL_S)

    threading.Thread(target=watch, daemon=True).start()


def _serve(payload: bytes, jobs: Any, results: Any, parent: int) -> None:
    """The worker process: build the collector, then run jobs until ``None`` arrives."""
    _exit_with_parent(parent)
    collector = None
    try:
        import cloudpickle

        policy, env_fn, num_envs, settings, seed, threads = cloudpickle.loads(payload)
        torch.set_num_threads(threads)
        from marft_algos.rollout.collector import RolloutCollector

        collector = RolloutCollector.from_factory(policy, env_fn, num_envs, settings, seed=seed)
        while True:
            job = jobs.get()
            if job is None:
                break
            requests, weights, version, sampling_seed = job
            _load_adapter_weights(policy, weights)
            collector.generator.manual_seed(sampling_seed)
            started = time.perf_counter()
            episodes = collector.collect(requests)
            seconds = time.perf_counter() - started
            for episode in episodes:
                for decision in episode.decisions:
                    decision.policy_version = version
            results.put(("episodes", (episodes, version, seconds)))
    except ProgramFailures as exc:  # the run's own error, raised in the trainer as it is
        results.put(("program_failures", exc))
    except BaseException:  # everything goes back to the trainer
        results.put(("error", traceback.format_exc()))
    finally:
        if collector is not None:
            with contextlib.suppress(Exception):
                collector.close()


def _stop(process: Any, jobs: Any, results: Any) -> None:
    """Ask the worker to finish, then end it by force if it does not (every exit path)."""
    if process.is_alive():
        with contextlib.suppress(Exception):
            jobs.put(None)
        process.join(timeout=5)
    if process.is_alive():
        process.terminate()
        process.join(timeout=5)
    if process.is_alive():
        process.kill()
        process.join()
    for q in (jobs, results):
        # Jobs the worker never read must not hold this process at exit.
        q.cancel_join_thread()
        q.close()


class RolloutWorker:
    """A process that runs rollouts with its own copy of ``policy`` and its own env copies.

    Args:
        policy: The policy to copy (pickled with ``cloudpickle``: base model, adapters,
            tokenizers); later jobs send only the adapters' weights.
        env_fn: Builds one env copy in the worker (a lambda is fine).
        num_envs: Env copies stepped together in the worker.
        settings: Generation settings of the rollouts.
        seed: The worker collector's seed (its reset RNG; jobs give explicit requests).
        threads: Torch threads of the worker (default: the trainer's count).
    """

    def __init__(
        self,
        policy: Any,
        env_fn: Callable[[], Any],
        num_envs: int,
        settings: GenerationSettings | None,
        *,
        seed: int,
        threads: int | None = None,
    ) -> None:
        import cloudpickle

        threads = threads or torch.get_num_threads()
        try:
            payload = cloudpickle.dumps((policy, env_fn, num_envs, settings, seed, threads))
        except Exception as err:
            raise ValueError(
                f"Asynchronous rollouts copy the policy and env_fn into a worker process, but "
                f"they cannot be pickled ({type(err).__name__}: {err}); make env_fn a plain "
                f"function or lambda over importable classes, or set max_staleness=0."
            ) from err
        context = torch.multiprocessing.get_context("spawn")
        self._jobs = context.Queue()
        self._results = context.Queue()
        self._process = context.Process(
            target=_serve,
            args=(payload, self._jobs, self._results, os.getpid()),
            daemon=True,
            name="marft-rollout-worker",
        )
        self._process.start()
        self._finalizer = weakref.finalize(self, _stop, self._process, self._jobs, self._results)
        self.pending = 0
        """Jobs submitted and not yet read back."""
        self.seconds: float | None = None
        """Wall time the worker took to collect the episodes :meth:`result` returned last."""

    @property
    def pid(self) -> int | None:
        return self._process.pid

    def submit(
        self,
        requests: Sequence[EpisodeRequest],
        weights: Mapping[str, list[np.ndarray]],
        version: int,
        sampling_seed: int,
    ) -> None:
        """Queue a job: run ``requests`` with these adapter weights (``version``), the sampling
        generator seeded with ``sampling_seed``."""
        self._check_alive()
        self._jobs.put((list(requests), dict(weights), int(version), int(sampling_seed)))
        self.pending += 1

    def result(self) -> tuple[list[Episode], int]:
        """The oldest pending job's episodes and version (blocks until they are ready).

        Raises:
            RolloutWorkerError: The worker raised (its traceback is in the message) or died.
        """
        if not self.pending:
            raise RuntimeError("RolloutWorker.result() called with no job pending.")
        while True:
            try:
                kind, value = self._results.get(timeout=_POLL_S)
            except queue.Empty:
                self._check_alive()
                continue
            if kind != "episodes":
                self._raise_reported(kind, value)
            self.pending -= 1
            episodes, version, self.seconds = value
            return episodes, version

    def _raise_reported(self, kind: str, value: Any) -> None:
        """Raise what the worker reported: too many failed agent programs as the collector
        raises them in a synchronous run, anything else with the worker's traceback."""
        self.close()
        if kind == "program_failures":
            raise value
        raise RolloutWorkerError(f"The rollout worker failed:\n{value}")

    def _check_alive(self) -> None:
        if not self._process.is_alive():
            code = self._process.exitcode
            # An error it reported just before exiting is the better message.
            with contextlib.suppress(queue.Empty):
                kind, value = self._results.get(timeout=_POLL_S)
                if kind != "episodes":
                    self._raise_reported(kind, value)
            self.close()
            raise RolloutWorkerError(
                f"The rollout worker process (pid {self._process.pid}) died with exit code "
                f"{code} (a negative code is the signal that ended it, e.g. -9: killed, often "
                f"for lack of memory); the run stops. Resume it from its last checkpoint."
            )

    def close(self) -> None:
        """Stop the worker process (idempotent; also runs when the object is collected and at
        interpreter exit)."""
        self._finalizer()
        self.pending = 0
