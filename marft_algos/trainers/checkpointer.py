"""A trainer's checkpoints and run folder, kept apart from the training loop.

:class:`Checkpointer` saves and loads a *plain trainer state* — a JSON-able dict of counters and
random states (:func:`trainer_state`) — beside the adapters,
critic and optimizers (:mod:`marft_algos.runs.checkpoint`):

- :meth:`Checkpointer.save` writes a checkpoint that describes the run (``run_info``; rank 0
  writes, every rank waits);
- :meth:`Checkpointer.load` refuses a damaged checkpoint, another algorithm's, or a changed
  config (:class:`~marft_algos.runs.folder.ConfigMismatchError`) before anything is restored;
- :meth:`Checkpointer.newest` picks the checkpoint a resume continues from;
- :meth:`Checkpointer.prepare` writes ``config.json`` and refuses to start over an earlier run.

:func:`random_states` / :func:`restore_random_states` are the random-state part of the trainer
state: everything that affects logged numbers (rollouts, sampling, minibatch order, the sampled
held-out evaluation), so a resumed run logs what the uninterrupted run would.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from pettingzoo import AECEnv

from marft_algos.distributed import DistributedContext
from marft_algos.rollout.collector import RolloutCollector
from marft_algos.runs.folder import (
    RESUMABLE_CHANGES,
    ConfigMismatchError,
    RunDirectory,
    RunExistsError,
    write_atomic,
)

__all__ = ["Checkpointer", "env_spec_json", "random_states", "restore_random_states"]

logger = logging.getLogger("marft_algos.trainers.base")


class Checkpointer:
    """Saves, loads and finds one run's checkpoints, and guards its run folder.

    Args:
        algorithm: The trainer's algorithm name, recorded in (and checked against) every
            checkpoint.
        config: The trainer's config (``to_dict()``, ``overwrite``): a checkpoint written under
            other settings is refused by :meth:`load`.
        run_dir: The run folder (None: nothing is written, :meth:`newest` has nowhere to look).
        distributed: This process's place in a data-parallel run; rank 0 writes.
    """

    def __init__(
        self,
        algorithm: str,
        config: Any,
        run_dir: RunDirectory | None = None,
        distributed: DistributedContext | None = None,
    ) -> None:
        self.algorithm = algorithm
        self.config = config
        self.run_dir = run_dir
        self.dist = distributed if distributed is not None else DistributedContext()
        self.continuing = False
        """The folder's run is this one (set by a resume, or once :meth:`prepare` ran)."""

    def prepare(self, iteration: int, description: Mapping[str, Any]) -> None:
        """Refuse to start over an earlier run unless ``config.overwrite``; write ``description``
        as ``config.json`` (rank 0).

        With several processes every rank checks the folder before rank 0 changes it, so all of
        them refuse (or go on) together.

        Raises:
            RunExistsError: The folder holds an earlier run, this is not a resumed one, and
                ``config.overwrite`` is not set.
        """
        if self.run_dir is None:
            return
        earlier = not self.continuing and iteration == 0 and self.run_dir.has_run()
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
        self.continuing = True
        if self.dist.is_main:
            write_atomic(self.run_dir.config_path, json.dumps(description, indent=2, default=str))
        self.dist.barrier()

    def save(
        self,
        directory: str | Path,
        policy: Any,
        critic: Any,
        optimizers: Mapping[str, Any],
        state: Mapping[str, Any],
    ) -> Path:
        """Write adapters, critic, optimizers and ``state`` (its ``"run"`` entry also describes the
        checkpoint in its manifest); atomic, rank 0 writes, every rank returns once it is done."""
        from marft_algos.runs.checkpoint import save_checkpoint

        _check_checkpointable(policy, critic)
        if self.dist.is_main:
            save_checkpoint(
                directory,
                policy,
                critic=critic,
                optimizers=dict(optimizers),
                state=dict(state),
                metadata={"algorithm": self.algorithm, **state.get("run", {})},
            )
        self.dist.barrier()  # no rank resumes or evaluates from a half-written folder
        return Path(directory)

    def load(
        self,
        directory: str | Path,
        policy: Any,
        critic: Any,
        optimizers: Mapping[str, Any],
        *,
        allow_config_change: bool = False,
    ) -> dict[str, Any]:
        """Restore the weights and optimizer states :meth:`save` wrote; return its trainer state.

        Raises:
            CorruptCheckpointError: A file differs from its recorded checksum.
            ValueError: Another algorithm wrote the checkpoint.
            ConfigMismatchError: The checkpoint's config differs from this one in a field that
                changes the run (anything but :data:`RESUMABLE_CHANGES`), unless
                ``allow_config_change``.

            Nothing is restored when any of these is raised.
        """
        from marft_algos.runs.checkpoint import load_checkpoint, read_state, verify_checkpoint

        verify_checkpoint(directory)  # a damaged checkpoint is refused before anything changes
        saved = read_state(directory)
        if saved.get("algorithm") != self.algorithm:
            raise ValueError(
                f"Checkpoint was written by the {saved.get('algorithm')!r} trainer; this is {self.algorithm!r}."
            )
        config = saved.get("config", {})
        changed = {
            k: (config[k], v)
            for k, v in self.config.to_dict().items()
            if k in config and k not in RESUMABLE_CHANGES and config[k] != v
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
        _check_checkpointable(policy, critic)
        return load_checkpoint(directory, policy, critic=critic, optimizers=dict(optimizers))

    def newest(self) -> Path | None:
        """The newest checkpoint in the run folder that verifies (None, with a warning: none yet,
        the run starts again from iteration 0; a damaged newer one is skipped with a warning).

        Raises:
            ValueError: There is no run folder.
            CorruptCheckpointError: There are checkpoint folders, and none verifies.
        """
        from marft_algos.runs.checkpoint import CorruptCheckpointError, newest_valid_checkpoint

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
        return directory


def _check_checkpointable(policy: Any, critic: Any) -> None:
    """Refuse a policy or critic the checkpoint format does not know (the library's own classes)."""
    from marft_algos.policy.critic import Critic
    from marft_algos.policy.multi_agent import MultiAgentPolicy

    if not isinstance(policy, MultiAgentPolicy) or not (
        critic is None or isinstance(critic, Critic)
    ):
        raise TypeError(
            f"Checkpoints store a MultiAgentPolicy and a Critic (peft adapters, value head); this "
            f"trainer has a {type(policy).__name__} and a {type(critic).__name__}. "
            f"Save a custom policy yourself, or set output_dir=None."
        )


def random_states(
    rng: np.random.Generator,
    collector: RolloutCollector,
    eval_collector: RolloutCollector | None,
    distributed: DistributedContext,
) -> dict[str, Any]:
    """The trainer's, the rollouts' and the held-out evaluation's random states, as JSON data.

    Every rank samples with its own generator: all of them are gathered (every rank must call
    this), for a resume on as many ranks.
    """
    state: dict[str, Any] = {
        "rng": rng.bit_generator.state,
        "collector_rng": collector.rng.bit_generator.state,
        "collector_generator": collector.generator.get_state().tolist(),
        "collector_generators": distributed.gather(collector.generator.get_state().tolist()),
        "world_size": distributed.world_size,
    }
    if eval_collector is not None:
        state["eval_rng"] = eval_collector.rng.bit_generator.state
        state["eval_generator"] = eval_collector.generator.get_state().tolist()
        state["eval_generators"] = distributed.gather(eval_collector.generator.get_state().tolist())
    return state


def restore_random_states(
    state: Mapping[str, Any],
    rng: np.random.Generator,
    collector: RolloutCollector,
    eval_collector: RolloutCollector | None,
    distributed: DistributedContext,
    *,
    seed: int,
    iteration: int,
) -> None:
    """Put back :func:`random_states`. A run resumed on another number of processes continues the
    tasks from the shared RNG, and reseeds each rank's sampling from ``seed`` and ``iteration``."""
    rng.bit_generator.state = state["rng"]
    collector.rng.bit_generator.state = state["collector_rng"]
    rank, world = distributed.rank, distributed.world_size
    per_rank = state.get("collector_generators") or [state["collector_generator"]]
    same_world = len(per_rank) == world
    if same_world:
        collector.generator.set_state(torch.tensor(per_rank[rank], dtype=torch.uint8))
    else:
        collector.generator.manual_seed(distributed.rollout_seed(seed + 7919 * iteration))
        logger.info(
            "Resumed a %d-process run on %d processes: sampling reseeded per rank.",
            len(per_rank),
            world,
        )
    if eval_collector is not None and "eval_rng" in state:
        eval_collector.rng.bit_generator.state = state["eval_rng"]
        eval_states = state.get("eval_generators") or [state["eval_generator"]]
        if same_world:
            eval_collector.generator.set_state(torch.tensor(eval_states[rank], dtype=torch.uint8))
        else:
            eval_collector.generator.manual_seed(distributed.rank_seed(seed + 104729 * iteration))


def env_spec_json(env: AECEnv) -> dict[str, Any] | None:
    """The env's registry spec as JSON data (None for an env not made through the registry)."""
    spec = getattr(env.unwrapped, "spec", None)
    return spec.to_json() if spec is not None and hasattr(spec, "to_json") else None


def run_description(
    collector: RolloutCollector,
    eval_collector: RolloutCollector | None,
    config: Any,
    distributed: DistributedContext,
) -> dict[str, Any]:
    """A trainer's ``run_info`` to start with: the env specs, the generation settings and, with
    several processes, the world size."""
    info: dict[str, Any] = {"env": env_spec_json(collector.envs[0])}
    if eval_collector is not None:
        info["eval_env"] = env_spec_json(eval_collector.envs[0])
    info["generation"] = dataclasses.asdict(config.generation)
    info.update(team_messages(collector.envs[0]))
    if distributed.enabled:
        info["world_size"] = distributed.world_size
    return info


def team_messages(env: Any) -> dict[str, Any]:
    """How the env writes its agents' messages, for deploying the team (``marft export``): each
    agent's profile (system prompt, graded) and the message layout; ``{}`` for an env whose
    messages come from elsewhere (an agent program writes its own)."""
    from marft_envs.core.env import FlexPOMDPEnv

    base = env.unwrapped
    if not isinstance(base, FlexPOMDPEnv):
        return {}
    profiles = {
        name: {"system_prompt": p.system_prompt, "graded": p.graded}
        for name, p in base.profiles.items()
    }
    if type(base).rollout_messages is not FlexPOMDPEnv.rollout_messages:
        return {"profiles": profiles, "message_layout": "written by the env itself"}
    return {"profiles": profiles, "message_layout": base.message_layout}


def trainer_state(trainer: Any) -> dict[str, Any]:
    """Counters and random states needed to continue a trainer's run exactly (a checkpoint's
    ``state.json``; every rank must call it, as it gathers each rank's sampling state)."""
    return {
        "algorithm": trainer.algorithm,
        "iteration": trainer.iteration,
        "config": trainer.config.to_dict(),
        **random_states(trainer.rng, trainer.collector, trainer.eval_collector, trainer.dist),
        **trainer.guards.state(),
        "run": trainer.run_info,
    }


def load_trainer_state(trainer: Any, state: Mapping[str, Any]) -> None:
    """Continue a trainer from :func:`trainer_state`'s counters and random states."""
    trainer.iteration = int(state["iteration"])
    restore_random_states(
        state,
        trainer.rng,
        trainer.collector,
        trainer.eval_collector,
        trainer.dist,
        seed=trainer.config.seed,
        iteration=trainer.iteration,
    )
    trainer.guards.load_state(state)
