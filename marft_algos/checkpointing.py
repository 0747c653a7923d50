"""What a trainer saves and restores, and how it uses its run folder (mixed into ``Trainer``).

- :meth:`RunFolderMixin.trainer_state` / :meth:`RunFolderMixin.load_trainer_state`: counters and
  every random state that affects logged numbers (rollouts, sampling, minibatch order, the sampled
  held-out evaluation), so a resumed run logs what the uninterrupted run would;
- :meth:`RunFolderMixin.save_checkpoint` / :meth:`RunFolderMixin.load_checkpoint` /
  :meth:`RunFolderMixin.resume`: checkpoints that describe the run (``run_info``) and a resume that
  refuses a changed config (:class:`~marft_algos.run_dir.ConfigMismatchError`);
- the run folder's ``config.json`` and the refusal to start over an earlier run.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from pettingzoo import AECEnv

from marft_algos.run_dir import (
    RESUMABLE_CHANGES,
    ConfigMismatchError,
    RunDirectory,
    RunExistsError,
    write_atomic,
)

__all__ = ["RunFolderMixin", "env_spec_json"]

logger = logging.getLogger("marft_algos.trainer")


class RunFolderMixin:
    """Checkpoint, resume and run-folder methods of :class:`~marft_algos.trainer.Trainer`."""

    algorithm: ClassVar[str]
    config: Any
    policy: Any
    critic: Any
    collector: Any
    eval_collector: Any
    rng: np.random.Generator
    iteration: int
    logger: Any
    run_dir: RunDirectory | None
    run_info: dict[str, Any]
    _continuing: bool
    _entropy_baseline: list[float]
    _nonfinite_streak: int
    dist: Any

    def _checkpointed_optimizers(self) -> dict[str, Any]:
        raise NotImplementedError

    def sync_rollout_backend(self, version: int) -> None:
        raise NotImplementedError

    def _prepare_run_dir(self) -> None:
        """Refuse to start over an earlier run unless told to; write ``config.json`` (rank 0).

        With several processes every rank checks the folder before rank 0 changes it, so all of
        them refuse (or go on) together."""
        if self.run_dir is None:
            return
        earlier = not self._continuing and self.iteration == 0 and self.run_dir.has_run()
        self.dist.barrier()
        if earlier:
            if not self.config.overwrite:
                raise RunExistsError(
                    f"{str(self.run_dir.path)!r} already holds {self.run_dir.describe()}. Pass --resume "
                    f"(Trainer.resume()) to continue it, --overwrite (config.overwrite=True) to replace "
                    f"it, or choose another --output-dir."
                )
            if self.dist.is_main:
                logger.warning("Overwriting the earlier run in %s.", self.run_dir.path)
                self.run_dir.clear()
        self._continuing = True
        if self.dist.is_main:
            write_atomic(
                self.run_dir.config_path, json.dumps(self.describe(), indent=2, default=str)
            )
        self.dist.barrier()

    def close(self) -> None:
        """Release the run folder's lock and close TensorBoard (the process's exit does both too)."""
        self.logger.close()
        if self.run_dir is not None:
            self.run_dir.release()

    def describe(self) -> dict[str, Any]:
        """What this run is: algorithm, every config field and :attr:`run_info` (saved as ``config.json``)."""
        return {"algorithm": self.algorithm, **self.config.to_dict(), "run": self.run_info}

    def trainer_state(self) -> dict[str, Any]:
        """Counters and random states needed to continue the run exactly."""
        return {
            "algorithm": self.algorithm,
            "iteration": self.iteration,
            "config": self.config.to_dict(),
            "rng": self.rng.bit_generator.state,
            "collector_rng": self.collector.rng.bit_generator.state,
            "collector_generator": self.collector.generator.get_state().tolist(),
            # Each rank samples with its own generator: all of them, for a resume on as many ranks.
            "collector_generators": self.dist.gather(self.collector.generator.get_state().tolist()),
            "world_size": self.dist.world_size,
            **(
                {
                    "eval_rng": self.eval_collector.rng.bit_generator.state,
                    "eval_generator": self.eval_collector.generator.get_state().tolist(),
                    "eval_generators": self.dist.gather(
                        self.eval_collector.generator.get_state().tolist()
                    ),
                }
                if self.eval_collector is not None
                else {}
            ),
            "entropy_baseline": list(self._entropy_baseline),
            "nonfinite_streak": self._nonfinite_streak,
            "run": self.run_info,
        }

    def load_trainer_state(self, state: Mapping[str, Any]) -> None:
        if state.get("algorithm") != self.algorithm:
            raise ValueError(
                f"Checkpoint was written by the {state.get('algorithm')!r} trainer; this is {self.algorithm!r}."
            )
        self.iteration = int(state["iteration"])
        self.rng.bit_generator.state = state["rng"]
        self.collector.rng.bit_generator.state = state["collector_rng"]
        rank, world = self.dist.rank, self.dist.world_size
        per_rank = state.get("collector_generators") or [state["collector_generator"]]
        same_world = len(per_rank) == world
        if same_world:
            self.collector.generator.set_state(torch.tensor(per_rank[rank], dtype=torch.uint8))
        else:
            # Another world size: the tasks continue from the shared RNG; each rank's sampling is
            # reseeded from the run seed and the iteration.
            self.collector.generator.manual_seed(
                self.dist.rank_seed(self.config.seed + 7919 * self.iteration)
            )
            logger.info(
                "Resumed a %d-process run on %d processes: sampling reseeded per rank.",
                len(per_rank),
                world,
            )
        if self.eval_collector is not None and "eval_rng" in state:
            self.eval_collector.rng.bit_generator.state = state["eval_rng"]
            eval_states = state.get("eval_generators") or [state["eval_generator"]]
            if same_world:
                self.eval_collector.generator.set_state(
                    torch.tensor(eval_states[rank], dtype=torch.uint8)
                )
            else:
                self.eval_collector.generator.manual_seed(
                    self.dist.rank_seed(self.config.seed + 104729 * self.iteration)
                )
        self._entropy_baseline = list(state.get("entropy_baseline", []))
        self._nonfinite_streak = int(state.get("nonfinite_streak", 0))

    def _checkpointable(self) -> tuple[Any, Any]:
        """The policy and critic as the checkpoint format knows them (the library's own classes)."""
        from marft_algos.policy.critic import Critic
        from marft_algos.policy.multi_agent import MultiAgentPolicy

        if not isinstance(self.policy, MultiAgentPolicy) or not (
            self.critic is None or isinstance(self.critic, Critic)
        ):
            raise TypeError(
                f"Checkpoints store a MultiAgentPolicy and a Critic (peft adapters, value head); this "
                f"trainer has a {type(self.policy).__name__} and a {type(self.critic).__name__}. "
                f"Save a custom policy yourself, or set output_dir=None."
            )
        return self.policy, self.critic

    def save_checkpoint(self, directory: str | Path) -> Path:
        """Save adapters, critic, optimizers, RNG states and counters (atomic; rank 0 writes)."""
        from marft_algos.policy.checkpoint import save_checkpoint

        policy, critic = self._checkpointable()
        state = self.trainer_state()  # gathers every rank's sampling state: all ranks call this
        if self.dist.is_main:
            save_checkpoint(
                directory,
                policy,
                critic=critic,
                optimizers=self._checkpointed_optimizers(),
                state=state,
                metadata={"algorithm": self.algorithm, **self.run_info},
            )
        self.dist.barrier()  # no rank resumes or evaluates from a half-written folder
        return Path(directory)

    def load_checkpoint(self, directory: str | Path, *, allow_config_change: bool = False) -> None:
        """Restore everything :meth:`save_checkpoint` wrote; the next iteration continues the run.

        Raises:
            ConfigMismatchError: The checkpoint's config differs from this trainer's in a field
                that changes the run (anything but :data:`RESUMABLE_CHANGES`), unless
                ``allow_config_change``. Nothing is restored then.
        """
        from marft_algos.policy.checkpoint import load_checkpoint, read_state, verify_checkpoint

        verify_checkpoint(directory)  # a damaged checkpoint is refused before anything changes
        saved = read_state(directory).get("config", {})
        changed = {
            k: (saved[k], v)
            for k, v in self.config.to_dict().items()
            if k in saved and k not in RESUMABLE_CHANGES and saved[k] != v
        }
        if changed and not allow_config_change:
            detail = ", ".join(
                f"{k}: checkpoint {a!r} vs now {b!r}" for k, (a, b) in sorted(changed.items())
            )
            raise ConfigMismatchError(
                f"Resuming {str(directory)!r} with different settings would not continue the same run "
                f"({detail}). Resume with the run's settings, or pass --allow-config-change "
                f"(allow_config_change=True) to continue it under the new ones."
            )
        policy, critic = self._checkpointable()
        state = load_checkpoint(
            directory, policy, critic=critic, optimizers=self._checkpointed_optimizers()
        )
        self.load_trainer_state(state)
        self.sync_rollout_backend(self.iteration)

    def resume(
        self, directory: str | Path | None = None, *, allow_config_change: bool = False
    ) -> None:
        """Continue from ``directory``, or from the newest checkpoint in ``config.output_dir`` that
        verifies.

        Checkpoints are checked against the checksums recorded when they were written; a damaged
        newest one (flipped or truncated file, no manifest, an empty folder) is skipped with a
        warning naming it, and the run continues from the newest one that verifies. With no
        checkpoint folder yet (a run killed during its first iteration) the run starts again from
        iteration 0 in the same folder; with checkpoint folders of which none verifies it stops
        (:class:`~marft_algos.policy.checkpoint.CorruptCheckpointError`) rather than throw them
        away. ``metrics.jsonl`` keeps the records up to the checkpoint (atomically rewritten; a
        torn last line is dropped) and :attr:`logger` holds them again.
        """
        from marft_algos.policy.checkpoint import CorruptCheckpointError, newest_valid_checkpoint

        if directory is None:
            if self.run_dir is None:
                raise ValueError("resume() needs a checkpoint directory or config.output_dir.")
            directory, skipped = newest_valid_checkpoint(self.run_dir.path)
            if directory is None and skipped:
                raise CorruptCheckpointError(
                    f"No checkpoint in {str(self.run_dir.path)!r} verifies ({'; '.join(skipped)}). "
                    f"Restore the folder from a backup, or start the run again with --overwrite."
                )
            if directory is None:
                logger.warning(
                    "No checkpoint in %s yet: starting the run from iteration 0.", self.run_dir.path
                )
                self._continuing = True
                return
        self.load_checkpoint(directory, allow_config_change=allow_config_change)
        self._warn_missing_metrics()
        self.logger.truncate_after(self.iteration)
        self._continuing = True
        logger.info("Resumed from %s at iteration %d.", directory, self.iteration)

    def _warn_missing_metrics(self) -> None:
        """Say so when metrics.jsonl lacks iterations the checkpoint reached (deleted, replaced)."""
        if self.run_dir is None or not self.dist.is_main:
            return
        path = self.run_dir.metrics_path
        have = {r.get("iteration") for r in self.logger.read()} if path.is_file() else set()
        lost = [i for i in range(1, self.iteration + 1) if i not in have]
        if lost:
            logger.warning(
                "%s lacks the records of %d of the %d iterations before the checkpoint (%s); the "
                "run continues and its table, plots and learning curve will miss them. Restore "
                "the file from a backup to keep them.",
                path,
                len(lost),
                self.iteration,
                "missing" if not path.is_file() else f"first lost: {lost[0]}",
            )


def env_spec_json(env: AECEnv) -> dict[str, Any] | None:
    """The env's registry spec as JSON data (None for an env not made through the registry)."""
    spec = getattr(env.unwrapped, "spec", None)
    return spec.to_json() if spec is not None and hasattr(spec, "to_json") else None
