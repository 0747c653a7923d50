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
- **With a rollout backend** (the vLLM engine) the jobs run in a thread of the trainer's process
  (:class:`~marft_algos.rollout.engine_thread.EngineRolloutThread`) instead of a worker process:
  the engine holds its own weights. Adapters are synced into the engine on the main thread when
  a job is submitted (the engine is idle then: the previous job was just read back), as version
  ``i``; the trainer neither syncs nor rests the engine after its update, since the engine is
  generating then. vLLM's sleep mode (which frees the engine during the update) is refused.
- **Under torchrun** every rank runs its own worker (or engine thread) for its share of the
  requests, with its own sampling seed; the staleness metrics and the drop decision are reduced
  over ranks, and a checkpoint gathers every rank's in-flight batch (rank 0 writes it). Resumed on
  as many processes each rank takes its own share back (exact); on another number the batch is
  shared out anew in whole units (episodes; groups for GRPO, RLOO and REINFORCE++).
- Refused at construction: ``dynamic_sampling`` (its refill rounds need the batch's rewards
  before the next requests can be drawn).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping
from typing import Any

import numpy as np

from marft_algos.rollout.collector import Decision, Episode
from marft_algos.rollout.engine_thread import EngineRolloutThread
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
        backend = trainer.rollout_backend
        if getattr(getattr(backend, "settings", None), "sleep_mode", False):
            raise ValueError(
                f"{name}: vLLM sleep mode frees the engine while the trainer updates, but with "
                f"max_staleness={c.max_staleness} the engine generates the next batch then; "
                f"start the engine without sleep mode (drop --vllm-sleep-mode) or set "
                f"max_staleness=0."
            )
        if (
            backend is not None
            and not c.generation.do_sample
            and getattr(trainer.policy, "temperature", 1.0) != 1.0
        ):
            raise ValueError(
                f"{name}: greedy rollouts on a rollout backend are rescored by the policy at its "
                f"temperature ({trainer.policy.temperature}), which cannot run while it updates "
                f"(max_staleness={c.max_staleness}); sample the rollouts (do_sample=True) or set "
                f"max_staleness=0."
            )
        if getattr(c, "dynamic_sampling", False):
            raise ValueError(
                f"{name}: dynamic_sampling needs a batch's rewards before it can draw the next "
                f"requests, so it cannot run with max_staleness={c.max_staleness}; set one of "
                f"them off."
            )
        self.trainer = trainer
        self.max_staleness = int(c.max_staleness)
        self.worker: RolloutWorker | EngineRolloutThread | None = None
        self.ready: tuple[list[Episode], int] | None = None
        """A batch already here: read back for a checkpoint, or loaded from one."""
        self.seconds: float | None = None
        """The worker's wall time for the batch :meth:`next_batch` returned last (None: a batch
        loaded from a checkpoint); its tokens/s is the rollout's."""
        self._synced: int | None = None  # the version the rollout backend serves

    # ------------------------------------------------------------------ jobs
    def _submit(self, iteration: int) -> None:
        t, c = self.trainer, self.trainer.config
        requests = t.iteration_requests()
        seed = sampling_seed(c.seed, t.dist.rank, iteration)
        backend = t.rollout_backend
        if backend is None:
            if self.worker is None:
                self.worker = RolloutWorker(
                    t.policy, t.env_fn, c.rollout_threads, c.generation, seed=c.seed
                )
            assert isinstance(self.worker, RolloutWorker)
            weights = adapter_weights(t.policy, t.trainable_agents())
            self.worker.submit(requests, weights, t.iteration, seed)
            return
        if self.worker is None:
            self.worker = EngineRolloutThread(
                backend, t.env_fn, c.rollout_threads, c.generation, seed=c.seed
            )
        assert isinstance(self.worker, EngineRolloutThread)
        if self._synced != t.iteration:
            # On this thread while the engine is idle (every job was read back): the saved
            # adapter files are the job's snapshot of the weights.
            backend.sync_adapters(t.policy, t.iteration)
            self._synced = t.iteration
        self.worker.submit(requests, t.iteration, seed)

    def _pending(self) -> bool:
        return self.worker is not None and self.worker.pending > 0

    def generating(self) -> bool:
        """Whether a job is running (or queued) now."""
        return self._pending()

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
        # Every rank decides alike (each rank's batch has the same version; max() makes sure).
        while t.dist.max([version - sampled_by])[0] > self.max_staleness:
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
        total, count = t.dist.sum([sum(staleness), len(staleness)])  # over every rank's decisions
        (largest,) = t.dist.max([max(staleness, default=0)])
        self.attach_proximal(episodes, version)
        return episodes, {
            "rollout/staleness": total / count if count else 0.0,
            "rollout/staleness_max": int(largest),
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
        """The in-flight batch, waited for, as checkpoint state (``in_flight``: None if none):
        every rank's episodes in rank order and each rank's count (``shares``). Every rank must
        call this (it gathers)."""
        t = self.trainer
        if self.ready is None and self._pending():
            assert self.worker is not None
            self.ready = self.worker.result()
        mine = None
        if self.ready is not None:
            episodes, version = self.ready
            mine = (version, [_episode_state(e) for e in episodes])
        parts = t.dist.gather(mine)
        if all(p is None for p in parts):
            return {"in_flight": None}
        if any(p is None for p in parts) or len({p[0] for p in parts}) > 1:
            raise RuntimeError(
                f"The ranks' in-flight batches disagree ({[None if p is None else p[0] for p in parts]}"
                f" by version): this is a bug, please report it with the launch command."
            )
        return {
            "in_flight": {
                "version": parts[0][0],
                "episodes": [e for p in parts for e in p[1]],
                "shares": [len(p[1]) for p in parts],
            }
        }

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Continue from :meth:`state`: this rank's share of the saved batch is the next one
        trained on (a job the worker is running is dropped). Saved by as many processes, each
        rank takes back its own; by another number, the batch is shared out anew."""
        self.close()
        saved = state.get("in_flight")
        if saved is None:
            return
        episodes = [_episode_from_state(e) for e in saved["episodes"]]
        shares = list(saved.get("shares") or [len(episodes)])
        dist = self.trainer.dist
        if len(shares) == dist.world_size:
            first = sum(shares[: dist.rank])
            mine = episodes[first : first + shares[dist.rank]]
        else:
            mine = self._reshard(episodes)
            logger.info(
                "Resumed a %d-process asynchronous run on %d processes: its in-flight batch is "
                "shared out anew.",
                len(shares),
                dist.world_size,
            )
        self.ready = (mine, int(saved["version"]))

    def _reshard(self, episodes: list[Episode]) -> list[Episode]:
        """This rank's share of a whole in-flight batch, in the trainer's units (whole groups)."""
        t = self.trainer
        units = t.shards_per_iteration()
        if not units or len(episodes) % units:
            return [episodes[i] for i in t.dist.shard(len(episodes))]
        per = len(episodes) // units
        return [e for u in t.dist.shard(units) for e in episodes[u * per : (u + 1) * per]]

    def close(self) -> None:
        """Stop the worker (a running job is dropped; an engine call runs to its end first); the
        next batch starts a new one."""
        if self.worker is not None:
            self.worker.close()
            self.worker = None
        self._synced = None
