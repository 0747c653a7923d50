"""What the critic-free trainers (GRPO, RLOO, REINFORCE++) share: groups of samples per task,
advantages from rewards alone, and one pass of the shared policy-gradient step per
``num_iterations``.

Each iteration samples ``episodes_per_iteration / num_generations`` tasks and runs every task
``num_generations`` times (the episodes of a group share their reset seed, so they face the same
problem). Every agent of a team is its own learner: a sample is an ``(episode, agent)`` pair whose
reward is the episode's team return (or the agent's own credited return), and the agent's
decisions in that episode are trained on its advantage. A subclass says how advantages come from
rewards (:meth:`CriticFreeTrainer.batch_advantages`) and which :class:`~marft_algos.trainers.policy_gradient.Objective`
it minimises; the loop, the data-parallel split (whole groups per rank), dynamic sampling and the
metrics live here.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Hashable, Sequence
from typing import Any

import torch
from torch import Tensor

from marft_algos.common.batch import RolloutBatch, build_rollout_batch
from marft_algos.common.critic_free_advantages import zero_std_group_mask
from marft_algos.common.log_probs import KLEstimator, kl_penalty
from marft_algos.rollout.collector import Decision, Episode, EpisodeRequest
from marft_algos.trainers.base import Trainer
from marft_algos.trainers.branched import BranchCollecting, without_copies
from marft_algos.trainers.critic_free_config import (
    LOSS_NORMALIZERS,
    CriticFreeConfig,
    CriticFreeLevelConfig,
    check_level_options,
)
from marft_algos.trainers.policy_gradient import Objective
from marft_algos.trainers.stats import UpdateStats, advantage_abs_mean, agent_advantages

__all__ = [
    "LOSS_NORMALIZERS",
    "CriticFreeConfig",
    "CriticFreeLevelConfig",
    "CriticFreeLevelTrainer",
    "CriticFreeTrainer",
    "check_level_options",
]

logger = logging.getLogger(__name__)


class CriticFreeTrainer(BranchCollecting, Trainer):
    """Base of the trainers that learn from group or batch statistics of rewards (no critic)."""

    config: CriticFreeConfig

    def shards_per_iteration(self) -> int:
        return self.config.groups_per_iteration

    def objective(self) -> Objective:
        raise NotImplementedError

    def token_objective(self, **overrides: Any) -> Objective:
        """The objective with this config's clip ranges, entropy bonus and ``loss_type`` weighting."""
        c = self.config
        settings: dict[str, Any] = {
            "level": "token",
            "normalizer": LOSS_NORMALIZERS[c.loss_type],
            "epsilon": c.epsilon,
            "epsilon_high": c.epsilon_high,
            "entropy_coef": c.entropy_coef,
            "importance_sampling_level": c.importance_sampling_level,
            **overrides,
        }
        return Objective(**settings)

    def batch_advantages(
        self, episodes: list[Episode], batch: RolloutBatch
    ) -> tuple[Tensor, dict[str, Any]]:
        """Advantages of the batch's decisions, ``(N,)`` or ``(N, T)``, and extra metrics."""
        raise NotImplementedError

    # ------------------------------------------------------------------ sampling
    def _group_requests(self, n_groups: int, first_group: int) -> list[EpisodeRequest]:
        seeds = self.collector.rng.integers(0, 2**31 - 1, size=n_groups)
        return [
            EpisodeRequest(seed=int(seed), group=first_group + g)
            for g, seed in enumerate(seeds)
            for _ in range(self.config.num_generations)
        ]

    def _rewards(self, episode: Episode, agent: str) -> float:
        if self.config.reward_source == "team":
            return episode.team_return
        return episode.agent_returns.get(agent, 0.0)

    def _informative_groups(self, episodes: list[Episode]) -> set[int]:
        """Groups in which some agent's rewards differ (the others give zero advantages)."""
        keep = set()
        by_group: dict[int, list[Episode]] = defaultdict(list)
        for e in episodes:
            by_group[int(e.group or 0)].append(e)
        for group, members in by_group.items():
            for agent in self.agents:
                rewards = {
                    self._rewards(e, agent)
                    for e in members
                    if any(d.agent == agent for d in e.decisions)
                }
                if len(rewards) > 1:
                    keep.add(group)
                    break
        return keep

    def _rank_groups(self, n_groups: int, first_group: int) -> list[EpisodeRequest]:
        """Draw ``n_groups`` tasks (alike on every rank): this rank's share of whole groups."""
        requests = self._group_requests(n_groups, first_group)
        share = self.dist.rollout_shard(n_groups)
        per = self.config.num_generations
        return [r for g in share for r in requests[g * per : (g + 1) * per]]

    def shard_unit(self, index: int, episode: Episode) -> Hashable:
        return episode.group

    def _run_groups(self, n_groups: int, first_group: int) -> list[Episode]:
        return self.collector.collect(self._rank_groups(n_groups, first_group))

    def iteration_requests(self) -> list[EpisodeRequest]:
        return self._rank_groups(self.config.groups_per_iteration, 0)

    def collect_with_stats(self) -> tuple[list[Episode], dict[str, Any]]:
        c = self.config
        episodes = self._run_groups(c.groups_per_iteration, 0)
        if not c.dynamic_sampling:
            return episodes, {"rollout/groups_dropped": 0, "rollout/resample_rounds": 0}
        kept = self._all_ranks(self._informative_groups(episodes))
        pool = [e for e in episodes if e.group in kept]
        dropped = c.groups_per_iteration - len(kept)
        next_group = c.groups_per_iteration
        rounds = 0
        while len(kept) < c.groups_per_iteration and rounds < c.max_resample_rounds:
            wanted_more = c.groups_per_iteration - len(kept)
            more = self._run_groups(wanted_more, next_group)
            next_group += c.groups_per_iteration
            new = self._all_ranks(self._informative_groups(more))
            dropped += wanted_more - len(new)
            pool += [e for e in more if e.group in new]
            kept |= new
            rounds += 1
        wanted = set(sorted(kept)[: c.groups_per_iteration])
        if not wanted:
            logger.warning(
                "Dynamic sampling found no group with differing rewards; this iteration has nothing to learn."
            )
        stats = {"rollout/groups_dropped": dropped, "rollout/resample_rounds": rounds}
        return [e for e in pool if e.group in wanted], stats

    def _all_ranks(self, groups: set[int]) -> set[int]:
        """The union of every rank's group ids (each rank runs whole groups)."""
        return {g for part in self.dist.gather(sorted(groups)) for g in part}

    # ------------------------------------------------------------------ rewards
    def _acting_pairs(self, episodes: list[Episode]) -> list[tuple[int, str]]:
        return [
            (row, agent)
            for row, e in enumerate(episodes)
            for agent in self.agents
            if any(d.agent == agent for d in e.decisions)
        ]

    def _group_rewards(
        self, episodes: list[Episode], keys: list[tuple[int, str]]
    ) -> tuple[torch.Tensor, list[tuple[int, str]]]:
        """R of each ``(episode row, agent)`` sample and its group label ``(task group, agent)``."""
        rewards = torch.tensor(
            [self._rewards(episodes[row], agent) for row, agent in keys], dtype=torch.float32
        )
        groups = [(int(episodes[row].group or 0), agent) for row, agent in keys]
        return rewards, groups

    def batch_samples(
        self, episodes: list[Episode], batch: RolloutBatch
    ) -> tuple[Tensor, list[tuple[int, str]], Tensor]:
        """The batch's samples: one per ``(episode, agent)`` with decisions in the batch.

        Returns:
            ``(rewards, groups, index)``: ``(S,)`` R of each sample, its group label
            ``(task group, agent)``, and ``(N,)`` the sample of each decision.
        """
        keys = list(
            dict.fromkeys((int(r), a) for r, a in zip(batch.episode, batch.agents, strict=True))
        )
        position = {key: s for s, key in enumerate(keys)}
        index = torch.tensor(
            [position[(int(r), a)] for r, a in zip(batch.episode, batch.agents, strict=True)],
            dtype=torch.long,
        )
        rewards, groups = self._group_rewards(episodes, keys)
        return rewards, groups, index

    def reference_kl(
        self, batch: RolloutBatch, estimator: KLEstimator
    ) -> tuple[Tensor, dict[str, Any]]:
        """``(N, T)`` per-token KL(π_old ‖ π_ref) estimates (0 on padding) and ``train/kl``, their
        mean over every rank's tokens.

        Both sides are under the rollout temperature alone, without the top-k/top-p cut (TRL's
        convention), so the estimate is exactly 0 while the policy equals the reference.
        """
        step = self.policy_gradient()
        ref = step.reference_log_probs(batch)  # (N, T)
        old = step.penalty_log_probs(batch)  # (N, T)
        mask = batch.action_mask
        kl = torch.where(mask, kl_penalty(old, ref, estimator), torch.zeros_like(ref))
        total, count = self.dist.sum([float(kl.sum()), float(mask.sum())])
        return kl, {"train/kl": total / count if count else 0.0}

    def _rollout_metrics(self, episodes: list[Episode]) -> dict[str, Any]:
        keys = self._acting_pairs(episodes)
        flat, pairs = 0.0, float(len(keys))
        if keys and self.config.num_generations > 1:
            rewards, groups = self._group_rewards(episodes, keys)
            flat = float(zero_std_group_mask(rewards, groups).float().sum())
        flat, pairs = self.dist.sum([flat, pairs])
        if pairs and self.config.num_generations > 1:
            return {"rollout/zero_std_fraction": flat / pairs}
        return {}

    # ------------------------------------------------------------------ update
    def single_policy_step(self) -> bool:
        return self.config.num_iterations == 1 and self.config.num_minibatches == 1

    def decisions_with_gradient(self, episodes: list[Episode]) -> list[Decision] | None:
        """The trained decisions whose loss terms can have a gradient: with
        ``skip_zero_advantages``, no KL or entropy term and no reference forward for the
        advantages (``beta == 0``), those with a non-zero advantage; None (all of them)
        otherwise. Asynchronous runs compute proximal log-probs for these alone."""
        c = self.config
        episodes = without_copies(episodes)  # a shared prefix once (branch)
        if c.beta != 0 or c.entropy_coef != 0 or not c.skip_zero_advantages:
            return None
        trained = set(self.trainable_agents())
        batch = build_rollout_batch(episodes, agents=sorted(trained))
        # Every rank decides alike (advantages may take batch statistics over every rank, as the
        # update computes them): an empty share still enters those collectives.
        if not self.dist.sum([len(batch)])[0]:
            return []
        advantages, _ = self.batch_advantages(episodes, batch)  # no forward pass with beta == 0
        nonzero = advantages != 0 if advantages.dim() == 1 else (advantages != 0).any(-1)
        rows = [d for e in episodes for d in e.decisions if d.agent in trained]
        return [d for d, keep in zip(rows, nonzero.tolist(), strict=True) if keep]

    def _agents_in(self, agents: Sequence[str], active: Tensor) -> tuple[list[str], list[str]]:
        """The agents with a decision on some rank, and those with an active one, each in the same
        order on every rank."""
        flags = active.tolist()
        present = self.dist.sum(
            [float(agent in agents) for agent in self.agents]
            + [
                float(any(on and a == agent for a, on in zip(agents, flags, strict=True)))
                for agent in self.agents
            ]
        )
        n = len(self.agents)
        return (
            [agent for agent, k in zip(self.agents, present[:n], strict=True) if k],
            [agent for agent, k in zip(self.agents, present[n:], strict=True) if k],
        )

    def update(self, episodes: list[Episode]) -> dict[str, Any]:
        c = self.config
        metrics = self._rollout_metrics(episodes)
        episodes = without_copies(episodes)  # a shared prefix is trained once (branch)
        trained = [a for a in self.agents if a in self._optimizer_of]
        scheduled = self.agents_to_train()  # the others' decisions still enter the advantages
        step = self.policy_gradient()
        objective = step.objective
        stats = UpdateStats(scheduled, with_kl=objective.beta > 0)
        metrics.update(self.learning_rate_metrics())
        batch = build_rollout_batch(
            episodes,
            agents=trained,
            token_caps=c.max_new_tokens_per_agent,
            default_cap=c.max_new_tokens,
        )
        if not self.dist.sum([len(batch)])[0]:
            return {**metrics, **stats.metrics()}
        advantages, extra = self.batch_advantages(episodes, batch)  # (N,) or (N, T)
        metrics.update(extra)
        in_window = torch.tensor([a in scheduled for a in batch.agents], dtype=torch.bool)
        entries = (
            batch.action_mask & in_window.unsqueeze(-1) if objective.level == "token" else in_window
        )
        metrics.update(advantage_abs_mean(advantages, entries, self.dist))
        metrics.update(agent_advantages(advantages, entries, batch.agents, scheduled, self.dist))
        batch = batch.with_targets(advantages=advantages)
        # Zero-advantage rows add nothing to the surrogate; without entropy or KL terms they need no forward.
        nonzero = advantages != 0 if advantages.dim() == 1 else (advantages != 0).any(-1)
        active = (
            torch.ones(len(batch), dtype=torch.bool)
            if objective.beta != 0 or objective.entropy_coef != 0 or not c.skip_zero_advantages
            else nonzero
        )
        if not self.dist.sum([float(active.sum())])[0]:
            logger.info(
                "Iteration %d: every advantage is 0 and no KL or entropy term needs a gradient, "
                "so the update runs no forward or backward pass (the optimizers step on zero "
                "gradients, as they would have).",
                self.iteration + 1,
            )
        first_episode, total_episodes = self.dist.offset(len(episodes))
        for _ in range(c.num_iterations):
            for rows in batch.minibatch_indices(
                self.rng,
                c.num_minibatches,
                len(episodes),
                first_episode=first_episode,
                total_episodes=total_episodes,
            ):
                rows = rows[[batch.agents[r] in scheduled for r in rows]]
                minibatch = batch[rows]
                agents, with_work = self._agents_in(minibatch.agents, active[rows])
                if not agents:  # no rank has a decision of this minibatch
                    continue
                # Every agent with a decision steps, as without skipping: one whose rows were all
                # skipped steps on a zero gradient (Adam's momentum still moves its weights).
                result = self.policy_step(step, minibatch, agents, active=active[rows])
                if with_work:  # something ran forward: the step has statistics
                    stats.add_step(result)
        return {**metrics, **stats.metrics()}


class CriticFreeLevelTrainer(CriticFreeTrainer):
    """A critic-free trainer whose objective's granularity is the config's ``level``."""

    config: CriticFreeLevelConfig

    def objective(self) -> Objective:
        c = self.config
        return self.token_objective(level=c.level, logprob_normalization=c.logprob_normalization)
