"""One-step-off asynchronous training: the next iteration's rollouts run while this one updates.

With ``max_staleness = k >= 1`` a trainer gets its batches from :class:`AsyncRollouts` instead of
collecting them itself. The rollouts run in a :class:`~marft_algos.rollout.worker.RolloutWorker`
process with its own copy of the policy; after the batch of iteration ``i`` arrives, the requests
of iteration ``i + 1`` go to the worker with the adapters as they are now (version ``i``, the
number of updates applied), and the trainer updates on batch ``i`` meanwhile. So each batch but
the first is one version stale, and the update trains it with the decoupled objective
(``docs/maths.md``, "Stale rollouts"): the proximal log-probs, under the weights at the start of
the update, are computed here, one forward pass without gradient over the stale decisions.

- A batch sampled more than ``k`` versions before the update (possible after a change of
  ``max_staleness`` on resume) is dropped, logged, and sampled again with the current adapters:
  ``rollout/dropped_stale`` counts them; ``rollout/staleness`` and ``rollout/staleness_max`` are
  the mean and largest staleness of the decisions trained on.
- **Checkpoints hold the in-flight batch.** Saving waits for it and writes its episodes into the
  checkpoint's state, so a resumed run (a kill -9 included) trains on the same batch, with the
  same requests and sampling seeds, as the run that was interrupted: resume is exact.
- The worker's sampling generator is seeded per iteration (from the run seed, the rank and the
  iteration), so an asynchronous run repeats with its seed; it differs from a synchronous run of
  the same seed, whose rollouts use the newest adapters.
- Not supported yet, each refused with an error at construction: a ``rollout_backend`` (the
  vLLM engine), several processes (torchrun), and ``dynamic_sampling`` (its refill rounds need
  the batch's rewards before the next requests can be drawn).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping
from typing import Any

import numpy as np

from marft_algos.rollout.collector import Decision, Episode
from marft_algos.rollout.worker import RolloutWorker, adapter_weights
from marft_algos.trainers.proximal import attach_proximal, trained_decisions

__all__ = ["AsyncRollouts", "sampling_seed"]

logger = logging.getLogger(__name__)


def sampling_seed(seed: int, rank: int, iteration: int) -> int:
    """The worker's sampling seed for one iteration's rollouts."""
    return int(np.random.SeedSequence([seed, rank, iteration]).generate_state(1, np.uint64)[0])


def _episode_state(episode: Episode) -> dict[str, Any]:
    # Through JSON once: the checkpoint's state is JSON, and an env's info may hold other types.
    return json.loads(json.dumps(dataclasses.asdict(episode), default=str))


def _episode_from_state(state: Mapping[str, Any]) -> Episode:
    decisions = [Decision(**d) for d in state["decisions"]]
    return Episode(**{**state, "decisions": decisions})


class AsyncRollouts:
    """The batches of an asynchronous run (``max_staleness >= 1``); see the module notes.

    Args:
        trainer: The trainer (a :class:`~marft_algos.trainers.base.Trainer`): its policy,
            ``env_fn``, config, iteration count and requests.
    """

    def __init__(self, trainer: Any) -> None:
        c = trainer.config
        name = type(trainer).__name__
        if trainer.rollout_backend is not None:
            raise ValueError(
                f"max_staleness={c.max_staleness} runs rollouts in a worker process with its own "
                f"copy of the policy, which a rollout_backend (the vLLM engine) does not support "
                f"yet; set max_staleness=0 or use the transformers backend."
            )
        if trainer.dist.enabled:
            raise ValueError(
                f"max_staleness={c.max_staleness} is not supported with several processes "
                f"(torchrun) yet; set max_staleness=0 or run one process."
            )
        if getattr(c, "dynamic_sampling", False):
            raise ValueError(
                f"{name}: dynamic_sampling needs a batch's rewards before it can draw the next "
                f"requests, so it cannot run with max_staleness={c.max_staleness}; set one of "
                f"them off."
            )
        self.trainer = trainer
        self.max_staleness = int(c.max_staleness)
        self.worker: RolloutWorker | None = None
        self.ready: tuple[list[Episode], int] | None = None
        """A batch already here: read back for a checkpoint, or loaded from one."""
        self.seconds: float | None = None
        """The worker's wall time for the batch :meth:`next_batch` returned last (None: a batch
        loaded from a checkpoint); its tokens/s is the rollout's."""

    # ------------------------------------------------------------------ jobs
    def _submit(self, iteration: int) -> None:
        t = self.trainer
        if self.worker is None:
            c = t.config
            self.worker = RolloutWorker(
                t.policy, t.env_fn, c.rollout_threads, c.generation, seed=c.seed
            )
        requests = t.iteration_requests()
        weights = adapter_weights(t.policy, t.trainable_agents())
        seed = sampling_seed(t.config.seed, t.dist.rank, iteration)
        self.worker.submit(requests, weights, t.iteration, seed)

    def _pending(self) -> bool:
        return self.worker is not None and self.worker.pending > 0

    def _receive(self) -> tuple[list[Episode], int]:
        if self.ready is not None:
            out, self.ready = self.ready, None
            # Read back for a checkpoint by this worker (its last result), or loaded: unknown.
            self.seconds = self.worker.seconds if self.worker is not None else None
            return out
        assert self.worker is not None
        out = self.worker.result()
        self.seconds = self.worker.seconds
        return out

    def next_batch(self) -> tuple[list[Episode], dict[str, Any]]:
        """This iteration's episodes (stale ones carry proximal log-probs) and ``rollout/``
        staleness metrics; the next iteration's rollouts are running when it returns."""
        t = self.trainer
        version = t.iteration
        if self.ready is None and not self._pending():
            self._submit(t.iteration)  # the pipeline starts (or restarts) with fresh rollouts
        episodes, sampled_by = self._receive()
        dropped = 0
        while version - sampled_by > self.max_staleness:
            dropped += 1
            logger.warning(
                "Iteration %d: dropping a batch sampled by version %d, %d updates old "
                "(max_staleness=%d); sampling it again with the current adapters.",
                t.iteration + 1,
                sampled_by,
                version - sampled_by,
                self.max_staleness,
            )
            self._submit(t.iteration)
            episodes, sampled_by = self._receive()
        if t.iteration + 1 < t.config.iterations:
            self._submit(t.iteration + 1)  # runs while this batch trains
        staleness = [
            version - (version if d.policy_version is None else d.policy_version)
            for e in episodes
            for d in e.decisions
        ]
        self.attach_proximal(episodes, version)
        return episodes, {
            "rollout/staleness": float(np.mean(staleness)) if staleness else 0.0,
            "rollout/staleness_max": max(staleness, default=0),
            "rollout/dropped_stale": dropped,
        }

    def attach_proximal(self, episodes: list[Episode], version: int) -> None:
        """Set ``proximal_log_probs`` on the trained agents' stale decisions: their log-probs
        under the current weights (one forward pass without gradient). When the update takes a
        single optimizer step per agent, its own forward runs on these weights: the decisions are
        marked ``proximal_from_update`` instead and no pass is made. A run that corrects its
        engine's mismatch gives every decision proximal log-probs instead (``Trainer``)."""
        t = self.trainer
        if t.engine_correction:
            return
        stale = [
            d
            for d in trained_decisions(t, episodes)
            if d.policy_version is not None and d.policy_version < version
        ]
        attach_proximal(t, stale, own_forward=t.single_policy_step())

    # ------------------------------------------------------------------ checkpoints
    def state(self) -> dict[str, Any]:
        """The in-flight batch, waited for, as checkpoint state (``in_flight``: None if none)."""
        if self.ready is None and self._pending():
            assert self.worker is not None
            self.ready = self.worker.result()
        if self.ready is None:
            return {"in_flight": None}
        episodes, version = self.ready
        return {
            "in_flight": {"version": version, "episodes": [_episode_state(e) for e in episodes]}
        }

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Continue from :meth:`state`: the saved batch is the next one trained on (a job the
        worker is running is dropped)."""
        self.close()
        saved = state.get("in_flight")
        if saved is not None:
            episodes = [_episode_from_state(e) for e in saved["episodes"]]
            self.ready = (episodes, int(saved["version"]))

    def close(self) -> None:
        """Stop the worker (a running job is dropped); the next batch starts a new one."""
        if self.worker is not None:
            self.worker.close()
            self.worker = None
