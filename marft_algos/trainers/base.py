"""The training loop every trainer shares: collect → update → log → evaluate → checkpoint.

A trainer is built from explicit objects — ``Trainer(policy, env_fn, config, critic=...,
eval_env_fn=...)`` — and implements one method, :meth:`Trainer.update`, which turns a batch of
finished episodes into optimizer steps and returns its metrics. The loop here runs rollouts over
``config.rollout_threads`` env copies, logs ``metrics.jsonl`` (and TensorBoard), evaluates held
out (:class:`~marft_algos.trainers.evaluator.Evaluator`) before training and every
``eval_every`` iterations, and checkpoints into a locked run folder that :meth:`Trainer.resume`
continues exactly (:class:`~marft_algos.trainers.checkpointer.Checkpointer`). Non-finite updates
are skipped, ``max_nonfinite_iterations`` of them in a row stop the run with
:class:`TrainingDiverged`, and entropy blow-ups (the paper's §5.2 collapse) are flagged and
optionally rolled back (:class:`~marft_algos.trainers.guards.Guards`).
"""

from __future__ import annotations

import contextlib
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from pettingzoo import AECEnv

from marft_algos.distributed import DistributedContext
from marft_algos.policy.prefix_cache import forget_prompts
from marft_algos.protocols import CriticLike, PolicyLike, RolloutBackend
from marft_algos.rollout.collector import Episode, EpisodeRequest, RolloutCollector
from marft_algos.runs.folder import ConfigMismatchError, RunDirectory, TrainingDiverged
from marft_algos.runs.metrics import MetricsLogger
from marft_algos.runs.progress import TrainingProgress
from marft_algos.runs.samples import trim_samples
from marft_algos.runs.tracing import TraceSettings, episode_tracer
from marft_algos.trainers.async_rollout import AsyncRollouts
from marft_algos.trainers.backend import BackendSync
from marft_algos.trainers.checkpointer import (
    Checkpointer,
    load_trainer_state,
    run_description,
    trainer_state,
)
from marft_algos.trainers.config import TrainerConfig, check_agents, check_world_size
from marft_algos.trainers.evaluator import Evaluator, flag_no_signal, summarize, warn_unpaid_agents
from marft_algos.trainers.failures import set_aside_failures
from marft_algos.trainers.guards import Guards
from marft_algos.trainers.proximal import correct_engine, corrects_engine
from marft_algos.trainers.sharding import generating, own_share, shard_run
from marft_algos.trainers.stats import device_peak_gib, peak_metrics, token_count_metrics
from marft_algos.trainers.stepping import PolicySteps

__all__ = ["ConfigMismatchError", "Trainer", "TrainerConfig", "TrainingDiverged"]

logger = logging.getLogger(__name__)


class Trainer(PolicySteps, BackendSync, ABC):
    """Base class of every trainer; subclasses implement :meth:`update`.

    Args:
        policy: A multi-agent policy (``marft_algos.policy.MultiAgentPolicy``) covering every agent.
        env_fn: Builds one training env copy, e.g. ``lambda: marft_envs.make("math-dual-v7")``.
        config: The trainer's config dataclass.
        critic: Value function, for actor-critic trainers.
        eval_env_fn: Builds one held-out env copy (e.g. on the test split); None skips evaluation.
        distributed: This process's place in a data-parallel run (see :mod:`marft_algos.distributed`);
            default: the process group a launcher initialised, else one process.
        rollout_backend: Generates the training rollouts instead of the policy (e.g. an inference
            engine); its ``sync_adapters(policy, version)`` runs after every update. Evaluation
            and the update's log-probs stay on the policy.
    """

    algorithm: ClassVar[str] = "base"
    config_class: ClassVar[type[TrainerConfig]] = TrainerConfig
    critic_optimizer: torch.optim.Optimizer | None = None
    """The critic's optimizer (actor-critic trainers); :attr:`optimizers` holds the policy's."""

    def __init__(
        self,
        policy: PolicyLike,
        env_fn: Callable[[], AECEnv],
        config: TrainerConfig,
        *,
        critic: CriticLike | None = None,
        eval_env_fn: Callable[[], AECEnv] | None = None,
        distributed: DistributedContext | None = None,
        rollout_backend: RolloutBackend | None = None,
    ) -> None:
        if not isinstance(config, self.config_class):
            raise TypeError(
                f"{type(self).__name__} needs a {self.config_class.__name__}, got {type(config).__name__}."
            )
        self.policy = policy
        self.config = config
        self.critic = critic
        self.dist = distributed if distributed is not None else DistributedContext.current()
        check_world_size(self.dist.world_size, self.shards_per_iteration(), config)
        self.sharding, self.dist = shard_run(policy, critic, self.dist, config, rollout_backend)
        """The base models' FSDP units under ``config.fsdp`` (None otherwise)."""
        version = getattr(rollout_backend, "version", None)
        if rollout_backend is not None and isinstance(version, int) and version < 0:
            rollout_backend.sync_adapters(policy, 0)  # built with sync=False: serve them now
        torch.manual_seed(config.seed)
        # Reset seeds come from one RNG seeded alike on every rank (the global batch does not depend
        # on the world size); sampling uses a per-rank generator derived from the run seed.
        self.rollout_backend = rollout_backend
        self.env_fn = env_fn
        self.collector = RolloutCollector.from_factory(
            rollout_backend or policy,
            env_fn,
            config.rollout_threads,
            config.generation,
            seed=config.seed,
        )
        self.collector.generator.manual_seed(self.dist.rollout_seed(config.seed))
        self.agents: list[str] = list(self.collector.envs[0].possible_agents)
        self.check_team(self.agents)
        check_agents(config, self.agents, list(policy.agents))
        self.tracer = episode_tracer(TraceSettings.of_config(config))
        """Sends every episode as a trace where ``config.trace_*`` say (does nothing when off)."""
        self.evaluator = (
            Evaluator(policy, eval_env_fn, config, self.dist, self.tracer) if eval_env_fn else None
        )
        """Held-out evaluation (None without an ``eval_env_fn``)."""
        self.rng = np.random.default_rng(config.seed)
        self.build_optimizers()
        self.iteration = 0
        self.run_info = run_description(self.collector, self.eval_collector, config, self.dist)
        """What the run is beyond the config (env spec, policy layout, data sources), written into
        ``config.json`` and every checkpoint's state; callers may add entries before training."""
        # Every rank reads the run folder (resume); rank 0 alone locks and writes it.
        self.run_dir = RunDirectory(config.output_dir) if config.output_dir is not None else None
        if self.run_dir is not None and self.dist.is_main:
            self.run_dir.acquire()
        self.logger = MetricsLogger(
            config.output_dir if self.dist.is_main else None, tensorboard=config.tensorboard
        )
        self.checkpointer = Checkpointer(self.algorithm, config, self.run_dir, self.dist)
        """Saves and loads this run's checkpoints; guards its run folder."""
        self.guards = Guards.of(
            policy, critic, self._optimizer_of, self.checkpointed_optimizers, config
        )
        """Snapshots, the entropy blow-up check and the non-finite stop."""
        self._progress: TrainingProgress | None = None
        self.engine_correction = corrects_engine(config, policy, rollout_backend)
        """Whether updates correct the rollout engine's log-prob mismatch (``engine_correction``)."""
        self.async_rollouts = AsyncRollouts(self) if config.max_staleness else None
        """The batches of an asynchronous run (``max_staleness >= 1``); None: collected here."""
        self._credit_checked = False
        self._told_prompts = False  # the first "nothing to learn" warning says how to change them

    @classmethod
    def check_team(cls, agents: Sequence[str]) -> None:
        """Refuse a team this trainer cannot train (called on the env's agents; PPO: one agent)."""
        return None  # every team, unless a trainer says otherwise

    # ------------------------------------------------------------------ the loop
    @abstractmethod
    def update(self, episodes: list[Episode]) -> dict[str, Any]:
        """Optimise on one batch of finished episodes; return ``train/...`` metrics."""

    def shards_per_iteration(self) -> int:
        """Units of work an iteration shares among processes: episodes (GRPO: groups)."""
        return self.config.episodes_per_iteration

    def collect(self) -> list[Episode]:
        """The iteration's rollouts."""
        with self.generating():
            return self.own_episodes(self.collect_with_stats()[0])

    def collect_with_stats(self) -> tuple[list[Episode], dict[str, Any]]:
        """This process's share of the iteration's rollouts and ``rollout/...`` statistics of how
        they were sampled (GRPO overrides this to sample groups)."""
        return self.collector.collect(self.iteration_requests()), {}

    def iteration_requests(self) -> list[EpisodeRequest]:
        """This process's share of one iteration's episode requests (drawn alike on every rank)."""
        requests = self.collector.requests(self.config.episodes_per_iteration)  # the global list
        return [requests[i] for i in self.dist.rollout_shard(len(requests))]

    def own_episodes(self, episodes: list[Episode]) -> list[Episode]:
        """This rank's share of what its rollout group collected (:func:`own_share`)."""
        return own_share(episodes, self.dist, self.shard_unit)

    def shard_unit(self, index: int, episode: Episode) -> Hashable:
        """What the ranks share whole: an episode (GRPO-like trainers: its group)."""
        return index

    @property
    def eval_collector(self) -> RolloutCollector | None:
        """The held-out env copies' collector (None without an ``eval_env_fn``)."""
        return self.evaluator.collector if self.evaluator is not None else None

    def evaluate(self) -> dict[str, Any]:
        """Greedy held-out evaluation, plus a sampled one with ``eval_sampled`` (empty when no
        ``eval_env_fn`` was given; see :class:`~marft_algos.trainers.evaluator.Evaluator`)."""
        if self.evaluator is None:
            return {}
        self.rest_rollout_backend()
        forget_prompts(self.policy, self.critic)
        # The policy evaluates, whatever generates the rollouts.
        with generating(self.sharding, None):
            return self.evaluator.evaluate(self.iteration, self.run_dir, self.logger, self._phase)

    def generating(self) -> contextlib.AbstractContextManager[None]:
        """Where rollouts run (:func:`generating`)."""
        return generating(self.sharding, self.rollout_backend)

    def train_iteration(self) -> dict[str, Any]:
        """One iteration: collect, update (with the guards), return its metrics."""
        start = time.perf_counter()
        device_peak_gib(self.dist)  # counts from here
        forget_prompts(self.policy, self.critic, self.rollout_backend)  # a resume repeats exactly
        self._phase("rollout", len(self.dist.rollout_shard(self.config.episodes_per_iteration)))
        if self.async_rollouts is None:
            with self.generating():
                episodes, sampling_stats = self.collect_with_stats()
            episodes = self.own_episodes(episodes)
        else:
            episodes, sampling_stats = self.async_rollouts.next_batch()
            if self._progress is not None:  # the worker generated them, at its own pace
                self._progress.generated_elsewhere(episodes, self.async_rollouts.seconds)
        rollout_time = time.perf_counter() - start
        rollout_peak = device_peak_gib(self.dist)
        if not self._credit_checked:  # once, on the run's first episodes
            self._credit_checked = True
            warn_unpaid_agents(episodes, self.collector.envs[0], self.config)
        metrics = summarize(episodes, "rollout", self.dist)
        metrics["rollout/episodes"] = int(self.dist.sum([len(episodes)])[0])
        metrics.update(sampling_stats)
        generators = (self.policy, self.rollout_backend)
        counters = [getattr(g, "prefill", None) for g in generators]
        metrics.update(token_count_metrics(counters, self.dist, "rollout/prefill_tokens"))
        folder = self.run_dir.path if self.run_dir is not None else None
        self.tracer.record(episodes, self.iteration, "train", env=self.collector.envs[0])
        episodes, dropped = set_aside_failures(episodes, self.iteration, folder, self.dist)
        metrics.update(dropped)
        self.rest_rollout_backend()
        if self.engine_correction:  # the trainer's own log-probs of the engine's decisions
            metrics.update(correct_engine(self, episodes))
        start_update = time.perf_counter()
        self._phase("update")
        self.guards.start_update()
        metrics.update(self.update(episodes))
        update_counter = [getattr(self.policy, "update_prefill", None)]
        metrics.update(token_count_metrics(update_counter, self.dist, "train/prompt_tokens"))
        metrics["time/rollout_s"] = rollout_time
        metrics["time/update_s"] = time.perf_counter() - start_update
        metrics.update(
            peak_metrics(self.dist, rollout=rollout_peak, update=device_peak_gib(self.dist))
        )
        self.guards.check_entropy(metrics, self.iteration)
        self.guards.check_nonfinite(self.iteration)
        hint = not self._told_prompts
        if flag_no_signal(episodes, metrics, self.iteration + 1, self.dist, hint=hint):
            self._told_prompts = True
        # After the guards, which may roll the adapters back: the engine serves what trains next.
        self.sync_rollout_backend(self.iteration + 1)
        self.iteration += 1
        return metrics

    def train(self, *, progress: bool | str = False) -> list[dict[str, Any]]:
        """Run ``config.iterations - self.iteration`` iterations (so a resumed run finishes the plan).

        Args:
            progress: ``True``/``"auto"``, ``"rich"``, ``"plain"`` or ``False`` (quiet): how to
                show the phase, its episodes, tokens/s and the ETA
                (:class:`~marft_algos.runs.progress.TrainingProgress`). Torch's thread count is
                left as the process has it: call ``torch.set_num_threads(1)`` for a small model
                on a CPU (``marft train`` does, with ``--threads``).

        Returns:
            The metric records of this call, one per iteration (evaluation merged in).

        Raises:
            RunExistsError: ``output_dir`` holds an earlier run, and neither :meth:`resume` was
                called nor ``config.overwrite`` set.
            TrainingDiverged: See ``max_nonfinite_iterations``.
        """
        self.checkpointer.prepare(self.iteration, self.describe())
        records: list[dict[str, Any]] = []
        bar = TrainingProgress(
            progress if self.dist.is_main else False,
            self.config.iterations,
            self.iteration,
            eval_every=self.config.eval_every if self.eval_collector is not None else None,
        )
        self._progress = bar
        try:
            with bar.counting(c for c in (self.collector, self.eval_collector) if c is not None):
                self._run_iterations(bar, records)
        finally:
            self._progress = None
            if self.async_rollouts is not None:
                self.async_rollouts.close()  # no worker outlives train(), however it ends
        return records

    def _phase(self, name: str, episodes: int | None = None) -> None:
        if self._progress is not None:
            self._progress.phase(name, episodes)

    def _run_iterations(self, bar: TrainingProgress, records: list[dict[str, Any]]) -> None:
        with bar:
            if self.iteration == 0:
                self.logger.truncate_after(-1)  # a fresh run starts with no records
            if self.run_dir is not None and self.dist.is_main:
                trim_samples(self.run_dir.path, self.iteration if self.iteration else -1)
            if self.iteration == 0 and self.eval_collector is not None:
                initial = self.evaluate()
                self.logger.log(0, {**initial, "iteration_kind": "initial_eval"})
                records.append({"iteration": 0, **initial})
                bar.update(initial, advance=False)
            while self.iteration < self.config.iterations:
                metrics = self.train_iteration()
                if self.eval_collector is not None and self._due(self.config.eval_every):
                    metrics.update(self.evaluate())
                self.logger.log(self.iteration, metrics)
                records.append({"iteration": self.iteration, **metrics})
                bar.update(metrics)
                every_sync = self.config.sync_check_every
                if self.dist.enabled and every_sync and self.iteration % every_sync == 0:
                    self.check_in_sync()
                if self.run_dir is not None and self._due(self.config.checkpoint_every):
                    self.save_checkpoint(self.run_dir.path / f"checkpoint-{self.iteration}")
                    if self.dist.is_main:
                        self.run_dir.prune(self.config.keep_checkpoints)

    def _due(self, every: int) -> bool:
        """Whether an every-``every``-iterations event (0: at the end only) falls on this one."""
        return (
            bool(every and self.iteration % every == 0) or self.iteration == self.config.iterations
        )

    def check_in_sync(self) -> None:
        """Fail loudly if the ranks' adapters or critic differ (see :mod:`marft_algos.distributed`)."""
        self.dist.check_in_sync(self.guards.tensors(), "adapters and critic")

    # ------------------------------------------------------------------ checkpoints
    def describe(self) -> dict[str, Any]:
        """What this run is: algorithm, every config field and :attr:`run_info` (saved as ``config.json``)."""
        return {"algorithm": self.algorithm, **self.config.to_dict(), "run": self.run_info}

    def save_checkpoint(self, directory: str | Path) -> Path:
        """Save adapters, critic, optimizers, RNG states and counters (atomic; rank 0 writes)."""
        optimizers, state = self.checkpointed_optimizers(), trainer_state(self)
        if self.async_rollouts is not None:
            state.update(self.async_rollouts.state())  # the in-flight batch, waited for
        return self.checkpointer.save(directory, self.policy, self.critic, optimizers, state)

    def load_checkpoint(self, directory: str | Path, *, allow_config_change: bool = False) -> None:
        """Restore everything :meth:`save_checkpoint` wrote; the next iteration continues the run.

        Raises:
            ConfigMismatchError: The checkpoint's config differs in a field that changes the run
                (anything but ``RESUMABLE_CHANGES``), unless ``allow_config_change``; nothing is
                restored then.
        """
        optimizers, allowed = self.checkpointed_optimizers(), allow_config_change
        state = self.checkpointer.load(
            directory, self.policy, self.critic, optimizers, allow_config_change=allowed
        )
        load_trainer_state(self, state)
        self.set_learning_rates()  # the config's, not those the optimizer states were saved with
        if self.async_rollouts is not None:
            self.async_rollouts.load_state(state)
        self.sync_rollout_backend(self.iteration)

    def resume(
        self, directory: str | Path | None = None, *, allow_config_change: bool = False
    ) -> None:
        """Continue from ``directory``, or from the newest checkpoint in ``config.output_dir`` that
        verifies (:meth:`~marft_algos.trainers.checkpointer.Checkpointer.newest`: a damaged one is
        skipped with a warning; none at all starts again from iteration 0; none that verifies
        stops). ``metrics.jsonl`` keeps the records up to the checkpoint (atomically rewritten; a
        torn last line is dropped) and :attr:`logger` holds them again.
        """
        directory = directory if directory is not None else self.checkpointer.newest()
        if directory is not None:
            self.load_checkpoint(directory, allow_config_change=allow_config_change)
            if self.dist.is_main:
                self.logger.warn_missing(self.iteration)
            self.logger.truncate_after(self.iteration)
            logger.info("Resumed from %s at iteration %d.", directory, self.iteration)
        self.checkpointer.continuing = True

    def close(self) -> None:
        """Release the run folder's lock, close TensorBoard and the env copies (the process's exit
        does all of it too)."""
        self.logger.close()
        self.tracer.close()
        if self.async_rollouts is not None:
            self.async_rollouts.close()
        for collector in (self.collector, self.eval_collector):
            if collector is not None:
                collector.close()
        if self.run_dir is not None:
            self.run_dir.release()
