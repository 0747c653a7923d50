"""The training loop every trainer shares: collect → update → log → evaluate → checkpoint.

A trainer is built from explicit objects — ``Trainer(policy, env_fn, config, critic=...,
eval_env_fn=...)`` — and implements one method, :meth:`Trainer.update`, which turns a batch of
finished episodes into optimizer steps and returns its metrics. Everything else lives here:

- rollouts over ``config.rollout_threads`` env copies (:class:`~marft_algos.rollout.RolloutCollector`);
- ``metrics.jsonl`` (one record per iteration) and the config beside it, optional TensorBoard;
- held-out evaluation with greedy decoding before training and every ``eval_every`` iterations;
- checkpoints every ``checkpoint_every`` iterations (default: every one, the newest
  ``keep_checkpoints`` kept) and at the end; :meth:`Trainer.resume`, which refuses a changed
  config and continues with the metrics an uninterrupted run would log;
- a locked run folder (:class:`~marft_algos.run_dir.RunDirectory`): a second process on it, or
  a fresh run over an earlier one without ``overwrite``, is refused;
- a guard that skips an update whose loss or gradients are not finite, and says so; a run whose
  updates are all skipped for ``max_nonfinite_iterations`` iterations in a row stops with
  :class:`TrainingDiverged`;
- detection of entropy blow-ups (the paper's §5.2 collapse) with optional rollback to the last
  good state.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import math
import time
import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from pettingzoo import AECEnv

from marft_algos.checkpointing import RunFolderMixin, env_spec_json
from marft_algos.common.batch import RolloutBatch, build_rollout_batch
from marft_algos.distributed import DistributedContext
from marft_algos.evaluation import (
    evaluation_requests,
    greedy,
    no_signal_reason,
    summarize_episodes,
)
from marft_algos.metrics import MetricsLogger
from marft_algos.policy_gradient import Objective, PolicyGradient
from marft_algos.progress import TrainingProgress
from marft_algos.protocols import CriticLike, PolicyLike, RolloutBackend
from marft_algos.rollout import Episode, GenerationSettings, RolloutCollector
from marft_algos.run_dir import (
    ConfigMismatchError,
    RunDirectory,
    TrainingDiverged,
)
from marft_algos.samples import transcripts_markdown, trim_samples, write_samples

__all__ = ["ConfigMismatchError", "Trainer", "TrainerConfig", "TrainingDiverged"]

logger = logging.getLogger(__name__)


@dataclass
class TrainerConfig:
    """Settings shared by every trainer (defaults: the paper's Table 3 where it gives one)."""

    iterations: int = 100
    """Training iterations (one rollout batch and its update each); passes over each batch are ppo_epochs (GRPO: num_iterations)."""
    episodes_per_iteration: int = 16
    """Episodes collected per iteration."""
    rollout_threads: int = 4
    """Env copies stepped together; generation is batched across them (paper: 4)."""
    seed: int = 0
    """Seeds episode resets, sampling and minibatch order."""
    max_new_tokens: int = 512
    """Longest action in tokens (paper: 512)."""
    max_new_tokens_per_agent: dict[str, int] | None = None
    """Per-agent overrides of max_new_tokens, e.g. {"actor": 16}."""
    temperature: float = 1.0
    """Sampling temperature for rollouts; rollout and update log-probs are those of the
    temperature-scaled distribution that was sampled."""
    top_p: float = 1.0
    """Nucleus sampling threshold for rollouts (1 disables); log-probs are those of the truncated
    distribution that was sampled (a token the current policy cuts has probability 0)."""
    top_k: int = 0
    """Top-k sampling for rollouts (0 disables); log-probs as for ``top_p``."""
    gradient_accumulation_steps: int = 1
    """Chunks each agent's share of a (mini)batch is split into for the forward and backward
    passes: bounds memory, and leaves the gradient unchanged (every loss weight comes from the
    whole batch)."""
    learning_rate: float = 1e-6
    """Adam learning rate of every agent's adapter (paper: 1e-6)."""
    adam_eps: float = 1e-5
    """Adam epsilon (paper: 1e-5)."""
    max_grad_norm: float = 0.5
    """Gradient clipping per adapter (paper: 0.5)."""
    eval_every: int = 0
    """Evaluate every K iterations (0: only before and after training)."""
    eval_episodes: int = 64
    """Held-out episodes per evaluation (greedy decoding)."""
    eval_sampled: bool = False
    """Also evaluate the policy as it is trained, sampling with the rollout settings (temperature,
    top-p, top-k), logged as ``eval_sampled/...`` beside the greedy ``eval/...``."""
    eval_samples: int = 4
    """Greedy held-out episodes written to samples.jsonl in output_dir at each evaluation, with
    every agent's observation, action and reward (0: none)."""
    output_dir: str | None = None
    """Run directory for metrics.jsonl, config.json and checkpoints (None: nothing written)."""
    checkpoint_every: int = 1
    """Save a checkpoint every K iterations (0: only at the end) when output_dir is set; the
    default, every iteration, means a killed run loses at most the iteration in progress."""
    keep_checkpoints: int = 2
    """Newest checkpoints kept in output_dir; older ones are deleted (0: keep all)."""
    overwrite: bool = False
    """Replace an earlier run found in output_dir instead of refusing to start."""
    max_nonfinite_iterations: int = 3
    """Stop (TrainingDiverged) after this many iterations in a row whose policy updates were all
    skipped as non-finite (0: never stop)."""
    tensorboard: bool = False
    """Also write TensorBoard scalars."""
    entropy_blowup_factor: float | None = 3.0
    """Flag an entropy blow-up when train/entropy exceeds this multiple of its early average."""
    rollback_on_blowup: bool = False
    """On a blow-up, restore the last good adapters, critic and optimizer states."""
    sync_check_every: int = 10
    """With several processes: compare a checksum of every rank's adapters and critic every K
    iterations and stop with an error if they differ (0: never)."""

    def __post_init__(self) -> None:
        check_finite_numbers(self)
        if (
            isinstance(self.seed, bool)
            or not isinstance(self.seed, int)
            or not 0 <= self.seed < 2**32
        ):
            raise ValueError(
                f"seed (--seed) must be an integer from 0 to {2**32 - 1} (numpy and torch take "
                f"no other), got {self.seed!r}."
            )
        positive = (
            "iterations",
            "episodes_per_iteration",
            "rollout_threads",
            "max_new_tokens",
            "eval_episodes",
            "gradient_accumulation_steps",
        )
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(
                    f"{type(self).__name__}.{name} must be >= 1, got {getattr(self, name)}."
                )
        for name in (
            "eval_every",
            "checkpoint_every",
            "top_k",
            "sync_check_every",
            "keep_checkpoints",
            "max_nonfinite_iterations",
            "eval_samples",
        ):
            if getattr(self, name) < 0:
                raise ValueError(
                    f"{type(self).__name__}.{name} must be >= 0, got {getattr(self, name)}."
                )
        if self.learning_rate <= 0:
            raise ValueError(f"learning_rate must be > 0, got {self.learning_rate}.")
        if self.adam_eps <= 0:
            raise ValueError(
                f"adam_eps must be > 0, got {self.adam_eps}: Adam divides by sqrt(v) + eps, so 0 "
                f"turns a parameter whose gradient is 0 into 0/0 = NaN. Use e.g. 1e-8 (paper: 1e-5)."
            )
        if self.max_grad_norm <= 0:
            raise ValueError(
                f"max_grad_norm must be > 0, got {self.max_grad_norm} (paper: 0.5; a large value "
                f"such as 1e9 effectively turns clipping off)."
            )
        if self.temperature <= 0:
            raise ValueError(
                f"temperature must be > 0 (use greedy evaluation for 0), got {self.temperature}."
            )
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}.")

    @property
    def generation(self) -> GenerationSettings:
        """Rollout sampling settings."""
        return GenerationSettings(
            max_new_tokens=self.max_new_tokens,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            do_sample=True,
            max_new_tokens_per_agent=dict(self.max_new_tokens_per_agent or {}),
        )

    @property
    def sampling(self) -> dict[str, Any]:
        """The rollout distribution's settings, as :meth:`MultiAgentPolicy.token_log_probs` takes them."""
        return {"temperature": self.temperature, "top_k": self.top_k, "top_p": self.top_p}

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def check_finite_numbers(config: Any) -> None:
    """Refuse NaN and infinity in any float field of a config dataclass (every subclass's too).

    A non-finite learning rate, epsilon, coefficient or threshold does not fail where it is set:
    it turns the weights into NaN, and the run then stops inside sampling with a message about
    probabilities. Checked when the config is built, it names the field and the value.
    """
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(
                f"{type(config).__name__}.{f.name} must be a finite number, got {value}; pass a "
                f"finite value (its default is {f.default!r})."
            )


def check_clip_range(epsilon: float, epsilon_high: float | None) -> None:
    """Validate PPO's clip ranges (ε_low, ε_high) with a message that says how to fix them."""
    if epsilon <= 0 or (epsilon_high is not None and epsilon_high <= 0):
        raise ValueError(f"epsilon and epsilon_high must be > 0; got {epsilon}, {epsilon_high}.")
    if epsilon_high is not None and epsilon_high < epsilon:
        raise ValueError(
            f"epsilon_high={epsilon_high} is below epsilon={epsilon}: the upper clip range must be at "
            f"least the lower one (DAPO's clip-higher raises it, e.g. epsilon_high=0.28); set "
            f"epsilon_high >= epsilon, or leave it unset for symmetric clipping."
        )


def check_num_minibatches(num_minibatches: int, episodes_per_iteration: int) -> None:
    """Validate a minibatch count against the episodes it splits, saying how to fix it."""
    if num_minibatches < 1:
        raise ValueError(f"num_minibatches must be >= 1, got {num_minibatches}.")
    if num_minibatches > episodes_per_iteration:
        raise ValueError(
            f"num_minibatches={num_minibatches} exceeds episodes_per_iteration="
            f"{episodes_per_iteration}; lower num_minibatches or collect more episodes."
        )


class Trainer(RunFolderMixin, ABC):
    """Base class of every trainer; subclasses implement :meth:`update`.

    Args:
        policy: A multi-agent policy (``marft_algos.policy.MultiAgentPolicy``) covering every agent.
        env_fn: Builds one training env copy, e.g. ``lambda: marft_envs.make("math-dual-v4")``.
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
        if self.dist.world_size > self.shards_per_iteration():
            raise ValueError(
                f"{self.dist.world_size} processes share {self.shards_per_iteration()} "
                f"{'groups' if self.shards_per_iteration() != config.episodes_per_iteration else 'episodes'} "
                f"per iteration, so some would have nothing to run; collect at least one per process "
                f"(raise episodes_per_iteration) or launch fewer processes."
            )
        torch.manual_seed(config.seed)
        # Reset seeds come from one RNG seeded alike on every rank (the global batch does not depend
        # on the world size); sampling uses a per-rank generator derived from the run seed.
        self.rollout_backend = rollout_backend
        self.collector = RolloutCollector.from_factory(
            rollout_backend or policy,
            env_fn,
            config.rollout_threads,
            config.generation,
            seed=config.seed,
        )
        self.collector.generator.manual_seed(self.dist.rank_seed(config.seed))
        self.agents: list[str] = list(self.collector.envs[0].possible_agents)
        missing = [a for a in self.agents if a not in policy.agents]
        if missing:
            raise ValueError(
                f"The policy has no entry for env agent(s) {missing}; it covers {list(policy.agents)}. "
                f"Build the policy with the env's agents: MultiAgentPolicy.from_pretrained(model, env.possible_agents)."
            )
        self.eval_collector = (
            RolloutCollector.from_factory(
                policy, eval_env_fn, config.rollout_threads, config.generation, seed=config.seed
            )
            if eval_env_fn is not None
            else None
        )
        unknown_caps = sorted(set(config.max_new_tokens_per_agent or {}) - set(self.agents))
        if unknown_caps:
            raise ValueError(
                f"max_new_tokens_per_agent names agent(s) {unknown_caps} that the env does not have; its "
                f"agents are {self.agents}. Name only those (e.g. {{{self.agents[-1]!r}: 16}})."
            )
        self.rng = np.random.default_rng(config.seed)
        self.optimizers = self._build_optimizers()
        self.iteration = 0
        self.run_info: dict[str, Any] = {}
        """What the run is beyond the config (env spec, policy layout, data sources), written into
        ``config.json`` and every checkpoint's state; callers may add entries before training."""
        self.run_info["env"] = env_spec_json(self.collector.envs[0])
        if self.eval_collector is not None:
            self.run_info["eval_env"] = env_spec_json(self.eval_collector.envs[0])
        self.run_info["generation"] = dataclasses.asdict(config.generation)
        if self.dist.enabled:
            self.run_info["world_size"] = self.dist.world_size
        # Every rank reads the run folder (resume); rank 0 alone locks and writes it.
        self.run_dir = RunDirectory(config.output_dir) if config.output_dir is not None else None
        if self.run_dir is not None and self.dist.is_main:
            self.run_dir.acquire()
        self.logger = MetricsLogger(
            config.output_dir if self.dist.is_main else None, tensorboard=config.tensorboard
        )
        self._entropy_baseline: list[float] = []
        self._last_good: dict[str, Any] | None = None
        self._continuing = False  # set by resume(): the folder's run is this one
        self._nonfinite_streak = 0
        self._progress: TrainingProgress | None = None
        self._steps = {"tried": 0, "skipped": 0}

    # ------------------------------------------------------------------ optimisation helpers
    CRITIC_KEY: ClassVar[str] = "__critic__"
    """Name of the critic optimizer's file in checkpoints (agent roles cannot start with '_')."""

    @property
    def cfg(self) -> Any:
        """Deprecated alias of :attr:`config`."""
        warnings.warn(
            "Trainer.cfg is deprecated; use Trainer.config.", DeprecationWarning, stacklevel=2
        )
        return self.config

    def _checkpointed_optimizers(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.optimizers)
        if self.critic_optimizer is not None:
            out[self.CRITIC_KEY] = self.critic_optimizer
        return out

    def _build_optimizers(self) -> dict[str, torch.optim.Optimizer]:
        """One Adam per trainable adapter; agents sharing an adapter share its optimizer."""
        optimizers: dict[str, torch.optim.Optimizer] = {}
        self._optimizer_of: dict[str, str] = {}
        seen: dict[int, str] = {}
        for agent in self.agents:
            params = self.policy.trainable_parameters(agent)
            if not params:
                continue
            key = seen.get(id(params[0]))
            if key is None:
                key = agent
                seen[id(params[0])] = key
                optimizers[key] = torch.optim.Adam(
                    params, lr=self.config.learning_rate, eps=self.config.adam_eps
                )
            self._optimizer_of[agent] = key
        if not optimizers:
            raise ValueError(
                "No agent has trainable parameters: every agent is frozen, so there is nothing to train."
            )
        return optimizers

    def trainable_agents(self) -> list[str]:
        """Agents whose adapters this trainer updates."""
        return [a for a in self.agents if a in self._optimizer_of]

    def zero_grad(self) -> None:
        for optimizer in self.optimizers.values():
            optimizer.zero_grad(set_to_none=True)

    # ------------------------------------------------------------------ the policy step
    def rollout_batch(self, episodes: Sequence[Episode]) -> RolloutBatch:
        """Every decision of ``episodes`` padded once (:func:`build_rollout_batch`)."""
        return build_rollout_batch(
            episodes,
            token_caps=self.config.max_new_tokens_per_agent,
            default_cap=self.config.max_new_tokens,
        )

    def objective(self) -> Objective:
        """The policy loss this trainer minimises."""
        raise NotImplementedError

    @property
    def trust_region_kl(self) -> float | None:
        """Undo a policy step whose KL on its batch exceeds this (None: never)."""
        return None

    def policy_gradient(self) -> PolicyGradient:
        """The shared policy-gradient step with this trainer's objective and sampling settings."""
        return PolicyGradient(
            self.policy,
            self.objective(),
            sampling=self.config.sampling,
            accumulation_steps=self.config.gradient_accumulation_steps,
            distributed=self.dist,
        )

    def policy_step(
        self,
        step: PolicyGradient,
        batch: RolloutBatch,
        agents: Sequence[str],
        *,
        active: torch.Tensor | None = None,
    ) -> dict[str, float]:
        """Backward, guards and optimizer step for one batch of the given agents' decisions.

        A non-finite loss or gradient skips the step, and a step that leaves a weight non-finite
        is undone (both counted in ``skipped_nonfinite``). With a trust region
        (:attr:`trust_region_kl`), the KL to the rollout policy is measured on ``batch`` after
        the step; a step that exceeds it is undone (``skipped_trust_region``).
        """
        result = step.backward(batch, active=active, agents=agents)
        self._steps["tried"] += 1
        if not math.isfinite(result["loss"]):
            self._steps["skipped"] += 1
            logger.warning(
                "Skipping a policy update at iteration %d: the loss is %s (policy loss %s, KL to "
                "the reference %s).",
                self.iteration,
                result["loss"],
                result.get("policy_loss"),
                result.get("kl"),
            )
            self.zero_grad()
            return {**result, "skipped_nonfinite": 1}
        limit = self.trust_region_kl
        before = self._snapshot(agents)
        grad_norm, applied = self.step_policy(agents)
        if applied and not self._weights_finite(agents):
            # Finite gradients can still step to NaN/inf weights (a huge learning rate, a
            # degenerate optimizer state); the next rollout would sample from them, so undo.
            logger.warning(
                "Undoing a policy update at iteration %d: it made adapter weights non-finite.",
                self.iteration,
            )
            self._restore(before)
            applied = False
        self._steps["skipped"] += int(not applied)
        result = {**result, "grad_norm": grad_norm, "skipped_nonfinite": int(not applied)}
        if applied and limit is not None:
            kl = step.approx_kl(
                batch if active is None else batch[active.nonzero().flatten().tolist()]
            )  # global
            result["approx_kl_after"] = kl
            if not kl <= limit:
                self._restore(before)
                result["skipped_trust_region"] = 1
        return result

    def _weights_finite(self, agents: Sequence[str]) -> bool:
        """Whether every trainable weight of the given agents' adapters is finite."""
        return all(
            bool(torch.isfinite(p).all())
            for agent in agents
            for p in self.policy.trainable_parameters(agent)
        )

    def step_policy(self, agents: Sequence[str]) -> tuple[float, bool]:
        """Clip and apply the gradients of the given agents' adapters.

        Returns:
            ``(total grad norm, applied)``; nothing is applied when a norm is not finite.
        """
        keys = sorted({self._optimizer_of[a] for a in agents if a in self._optimizer_of})
        norms = []
        for key in keys:
            params = [p for group in self.optimizers[key].param_groups for p in group["params"]]
            norms.append(float(torch.nn.utils.clip_grad_norm_(params, self.config.max_grad_norm)))
        if not all(math.isfinite(n) for n in norms):
            logger.warning("Skipping a policy update: gradient norm is not finite (%s).", norms)
            self.zero_grad()
            return float("nan"), False
        for key in keys:
            self.optimizers[key].step()
        self.zero_grad()
        return float(sum(norms)), True

    # ------------------------------------------------------------------ the loop
    @abstractmethod
    def update(self, episodes: list[Episode]) -> dict[str, Any]:
        """Optimise on one batch of finished episodes; return ``train/...`` metrics."""

    def shards_per_iteration(self) -> int:
        """Units of work an iteration shares among processes: episodes (GRPO: groups)."""
        return self.config.episodes_per_iteration

    def collect(self) -> list[Episode]:
        """The iteration's rollouts."""
        return self.collect_with_stats()[0]

    def collect_with_stats(self) -> tuple[list[Episode], dict[str, Any]]:
        """This process's share of the iteration's rollouts and ``rollout/...`` statistics of how
        they were sampled (GRPO overrides this to sample groups)."""
        requests = self.collector.requests(self.config.episodes_per_iteration)  # the global list
        share = self.dist.shard(len(requests))
        return self.collector.collect([requests[i] for i in share]), {}

    def summarize(self, episodes: Sequence[Episode], prefix: str) -> dict[str, Any]:
        """:func:`summarize_episodes` over every rank's episodes (this process's alone if one)."""
        if not self.dist.enabled:
            return summarize_episodes(episodes, prefix)
        gathered = self.dist.gather([_light(e) for e in episodes])
        return summarize_episodes([e for part in gathered for e in part], prefix)

    def evaluate(self) -> dict[str, Any]:
        """Greedy held-out evaluation, plus a sampled one with ``eval_sampled`` (empty when no
        ``eval_env_fn`` was given). With several processes each runs a share of the pinned
        episodes and the metrics cover all of them."""
        if self.eval_collector is None:
            return {}
        requests = evaluation_requests(self.eval_collector, self.config.eval_episodes)
        requests = [requests[i] for i in self.dist.shard(len(requests))]
        self._phase("eval", len(requests))
        episodes = self.eval_collector.collect(requests, greedy(self.config.generation))
        metrics = self.summarize(episodes, "eval")
        if self.run_dir is not None and self.dist.is_main and self.config.eval_samples:
            rows = write_samples(
                self.run_dir.path, self.iteration, episodes, self.config.eval_samples
            )
            self.logger.log_text("eval/samples", transcripts_markdown(rows), self.iteration)
        if self.config.eval_sampled:
            self._phase("eval (sampled)", len(requests))
            episodes = self.eval_collector.collect(requests, self.config.generation)
            metrics.update(self.summarize(episodes, "eval_sampled"))
        return metrics

    def train_iteration(self) -> dict[str, Any]:
        """One iteration: collect, update (with the guards), return its metrics."""
        start = time.perf_counter()
        self._phase("rollout", len(self.dist.shard(self.config.episodes_per_iteration)))
        if type(self).collect is not Trainer.collect:
            # A subclass customised collect() (the extension point before collect_with_stats).
            warnings.warn(
                f"{type(self).__name__} overrides Trainer.collect(); its rollout statistics (e.g. "
                f"GRPO's rollout/groups_dropped) are not logged. Override collect_with_stats() instead.",
                DeprecationWarning,
                stacklevel=2,
            )
            episodes, sampling_stats = self.collect(), dict[str, Any]()
        else:
            episodes, sampling_stats = self.collect_with_stats()
        rollout_time = time.perf_counter() - start
        metrics = self.summarize(episodes, "rollout")
        metrics["rollout/episodes"] = int(self.dist.sum([len(episodes)])[0])
        metrics.update(sampling_stats)
        start_update = time.perf_counter()
        self._phase("update")
        self._steps = {"tried": 0, "skipped": 0}
        metrics.update(self.update(episodes))
        metrics["time/rollout_s"] = rollout_time
        metrics["time/update_s"] = time.perf_counter() - start_update
        self._guard_entropy(metrics)
        self._guard_nonfinite()
        self._warn_if_nothing_to_learn(episodes, metrics)
        # After the guards, which may roll the adapters back: the engine serves what trains next.
        self.sync_rollout_backend(self.iteration + 1)
        self.iteration += 1
        return metrics

    def sync_rollout_backend(self, version: int) -> None:
        """Hand the policy's current adapters to the rollout backend, if there is one."""
        if self.rollout_backend is not None:
            self.rollout_backend.sync_adapters(self.policy, version)

    def _warn_if_nothing_to_learn(
        self, episodes: Sequence[Episode], metrics: dict[str, Any]
    ) -> None:
        """Flag (``rollout/nothing_to_learn``) and warn when the iteration's rewards carry no signal."""
        rewards = [d.reward for e in episodes for d in e.decisions]
        spread = (min(rewards), max(rewards)) if rewards else (0.0, 0.0)
        if self.dist.enabled:
            parts = self.dist.gather(spread)
            spread = (min(p[0] for p in parts), max(p[1] for p in parts))
        why = no_signal_reason(spread, metrics, self.iteration + 1)
        metrics["rollout/nothing_to_learn"] = int(why is not None)
        if why is not None:
            logger.warning(why)

    def _guard_nonfinite(self) -> None:
        """Count iterations whose policy steps were all skipped as non-finite; stop after K in a row."""
        tried, skipped = self._steps["tried"], self._steps["skipped"]
        self._nonfinite_streak = self._nonfinite_streak + 1 if tried and skipped == tried else 0
        limit = self.config.max_nonfinite_iterations
        if limit and self._nonfinite_streak >= limit:
            raise TrainingDiverged(
                f"Every policy update of the last {self._nonfinite_streak} iterations (up to iteration "
                f"{self.iteration + 1}) was skipped because its loss or gradients were not finite, so "
                f"the run cannot learn. Lower learning_rate, set max_grad_norm, check the rewards for "
                f"NaN/inf, or raise max_nonfinite_iterations (0 disables this stop)."
            )

    def train(self, *, progress: bool | str = False) -> list[dict[str, Any]]:
        """Run ``config.iterations - self.iteration`` iterations (so a resumed run finishes the plan).

        Args:
            progress: ``True``/``"auto"``: rich bars on a terminal, plain lines otherwise;
                ``"rich"``; ``"plain"``: lines per phase and per iteration (logger
                ``marft_algos.progress``, or standard error when logging does not show INFO);
                ``False``: quiet. Either shows the phase (rollout / update / eval), its episodes,
                tokens/s and the run's ETA (:mod:`marft_algos.progress`). Torch's CPU thread count
                is left as the process has it (``marft train`` sets 1 with ``--threads``; a
                library does not change a process-wide setting): call ``torch.set_num_threads(1)``
                for a small model on a CPU, where one thread is fastest.

        Returns:
            The metric records of this call, one per iteration (evaluation merged in).

        Raises:
            RunExistsError: ``output_dir`` holds an earlier run, and neither :meth:`resume` was
                called nor ``config.overwrite`` set.
            TrainingDiverged: See ``max_nonfinite_iterations``.
        """
        self._prepare_run_dir()
        records: list[dict[str, Any]] = []
        bar = TrainingProgress(
            progress if self.dist.is_main else False, self.config.iterations, self.iteration
        )
        self._progress = bar

        def episode_done(episode: Episode) -> None:
            bar.episode(sum(len(d.action_ids) for d in episode.decisions))

        collectors = [c for c in (self.collector, self.eval_collector) if c is not None]
        for collector in collectors:
            collector.on_episode = episode_done
        try:
            self._run_iterations(bar, records)
        finally:
            self._progress = None
            for collector in collectors:
                collector.on_episode = None
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
                every = self.config.eval_every
                if self.eval_collector is not None and (
                    (every and self.iteration % every == 0)
                    or self.iteration == self.config.iterations
                ):
                    metrics.update(self.evaluate())
                self.logger.log(self.iteration, metrics)
                records.append({"iteration": self.iteration, **metrics})
                bar.update(metrics)
                every_sync = self.config.sync_check_every
                if self.dist.enabled and every_sync and self.iteration % every_sync == 0:
                    self.check_in_sync()
                if self.run_dir is not None and (
                    (
                        self.config.checkpoint_every
                        and self.iteration % self.config.checkpoint_every == 0
                    )
                    or self.iteration == self.config.iterations
                ):
                    self.save_checkpoint(self.run_dir.path / f"checkpoint-{self.iteration}")
                    if self.dist.is_main:
                        self.run_dir.prune(self.config.keep_checkpoints)

    def check_in_sync(self) -> None:
        """Fail loudly if the ranks' adapters or critic differ (see :mod:`marft_algos.distributed`)."""
        params = [p for a in self.trainable_agents() for p in self.policy.trainable_parameters(a)]
        if self.critic is not None:
            params += list(self.critic.parameters())
        self.dist.check_in_sync(params, "adapters and critic")

    # ------------------------------------------------------------------ safety
    def _guard_entropy(self, metrics: dict[str, Any]) -> None:
        entropy = metrics.get("train/entropy")
        factor = self.config.entropy_blowup_factor
        if entropy is None or factor is None or not math.isfinite(entropy):
            return
        if len(self._entropy_baseline) < 3:
            self._entropy_baseline.append(entropy)
            self._last_good = self._snapshot() if self.config.rollback_on_blowup else None
            metrics["train/entropy_blowup"] = 0
            return
        baseline = float(np.mean(self._entropy_baseline))
        blown = entropy > factor * max(baseline, 1e-3)
        metrics["train/entropy_blowup"] = int(blown)
        if not blown:
            if self.config.rollback_on_blowup:
                self._last_good = self._snapshot()
            return
        logger.warning(
            "Entropy blow-up at iteration %d: train/entropy %.3f > %.1f x early average %.3f.",
            self.iteration,
            entropy,
            factor,
            baseline,
        )
        if self.config.rollback_on_blowup and self._last_good is not None:
            self._restore(self._last_good)
            metrics["train/rolled_back"] = 1
            logger.warning(
                "Rolled back adapters, critic and optimizers to the last good iteration."
            )

    def _modules_state(self, agents: Sequence[str] | None = None) -> dict[str, Any]:
        """Copies of the trainable parameters: every adapter and the critic, or some agents' adapters."""
        chosen = (
            self.trainable_agents()
            if agents is None
            else [a for a in agents if a in self._optimizer_of]
        )
        state: dict[str, Any] = {
            "policy": {
                a: [p.detach().clone() for p in self.policy.trainable_parameters(a)] for a in chosen
            }
        }
        if agents is None and self.critic is not None:
            state["critic"] = [p.detach().clone() for p in self.critic.parameters()]
        return state

    def _snapshot(self, agents: Sequence[str] | None = None) -> dict[str, Any]:
        """Parameters and optimizer states: of everything, or of the given agents' adapters only."""
        if agents is None:
            optimizers = self._checkpointed_optimizers()
            params = self._modules_state()
        else:
            keys = {self._optimizer_of[a] for a in agents if a in self._optimizer_of}
            optimizers = {k: self.optimizers[k] for k in keys}
            params = self._modules_state(agents)
        return {
            "params": params,
            "optimizers": {k: copy.deepcopy(o.state_dict()) for k, o in optimizers.items()},
        }

    def _restore(self, snapshot: Mapping[str, Any]) -> None:
        with torch.no_grad():
            for agent, tensors in snapshot["params"]["policy"].items():
                for p, saved in zip(self.policy.trainable_parameters(agent), tensors, strict=True):
                    p.copy_(saved)
            if self.critic is not None and "critic" in snapshot["params"]:
                for p, saved in zip(
                    self.critic.parameters(), snapshot["params"]["critic"], strict=True
                ):
                    p.copy_(saved)
        optimizers = self._checkpointed_optimizers()
        for key, state in snapshot["optimizers"].items():
            optimizers[key].load_state_dict(state)


def _light(episode: Episode) -> Episode:
    """An episode without prompts, log-probs or messages: what the metrics read, cheap to gather."""
    decisions = [
        dataclasses.replace(d, prompt_ids=[], log_probs=[], messages=[]) for d in episode.decisions
    ]
    return dataclasses.replace(episode, decisions=decisions)
