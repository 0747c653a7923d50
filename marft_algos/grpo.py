"""GRPO (paper eq. 2) with DAPO options (eq. 3), for single- and multi-agent envs.

Each iteration samples ``episodes_per_iteration / num_generations`` tasks and runs every task
``num_generations`` times (episodes of a group share their reset seed, so they face the same
problem). Every token of an agent's actions in episode ``i`` gets the group advantage
``(R_i − mean(R)) / std(R)``; in a team, groups are formed per agent, so each agent's samples are
normalised among themselves. The loss is the clipped surrogate per token, optionally plus
``beta`` × the k3 KL to the reference policy (the base model with adapters disabled). No critic.

Knob names follow TRL's ``GRPOConfig``: ``num_generations``, ``beta``, ``epsilon``, ``epsilon_high``,
``loss_type``, ``scale_rewards``, ``num_iterations``; defaults follow TRL's too.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np
import torch

from marft_algos.common.advantages import group_advantages, zero_std_group_mask
from marft_algos.common.batch import build_rollout_batch
from marft_algos.common.losses import Normalizer
from marft_algos.policy_gradient import Objective
from marft_algos.rollout import Episode, EpisodeRequest
from marft_algos.trainer import (
    Trainer,
    TrainerConfig,
    check_clip_range,
    check_num_minibatches,
)

__all__ = ["GRPOConfig", "GRPOTrainer"]

logger = logging.getLogger(__name__)

_LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo")
_NORMALIZERS: dict[str, Normalizer] = {
    "grpo": "sequence",
    "bnpo": "token",
    "dapo": "token",
    "dr_grpo": "constant",
}


@dataclass
class GRPOConfig(TrainerConfig):
    """Settings of :class:`GRPOTrainer` (names and defaults as TRL's ``GRPOConfig``)."""

    num_generations: int = 8
    """Episodes per task (the group size G)."""
    beta: float = 0.0
    """Weight of the k3 KL to the reference policy: the base model under the sampling temperature
    alone, without top-k/top-p, as in TRL (finite for every sampled token; docs/maths.md). 0: no
    reference forward pass."""
    epsilon: float = 0.2
    """Lower clip range ε_low."""
    epsilon_high: float | None = None
    """Upper clip range ε_high (DAPO clip-higher, e.g. 0.28); None: equal to epsilon."""
    loss_type: Literal["grpo", "bnpo", "dr_grpo", "dapo"] = "dapo"
    """Loss aggregation: per-sequence means (grpo), every token of the batch once (dapo; bnpo
    too, over the whole batch rather than TRL's per-micro-batch count, so the gradient does not
    depend on gradient_accumulation_steps), or each agent's token cap as a constant length
    (dr_grpo). The entropy bonus and the KL term are aggregated the same way."""
    scale_rewards: Literal["group", "batch", "none"] = "group"
    """Divide advantages by the group's reward std, the batch's, or not at all."""
    num_iterations: int = 1
    """Optimisation passes over each batch (μ; TRL's name). Not --iterations, which counts rollout-and-update iterations."""
    num_minibatches: int = 1
    """Optimizer steps per pass: the batch's episodes are shuffled and split into this many
    minibatches (TRL's ``steps_per_generation``); each minibatch's loss is aggregated over its own
    tokens or sequences."""
    dynamic_sampling: bool = False
    """DAPO: drop groups whose rewards are all equal and sample more groups to refill the batch."""
    max_resample_rounds: int = 4
    """With dynamic sampling: extra sampling rounds at most before training on a short batch."""
    reward_source: Literal["team", "agent"] = "team"
    """R_i of an agent: the episode's team return, or the agent's own credited return."""
    entropy_coef: float = 0.0
    """Entropy bonus weight (GRPO uses none)."""
    skip_zero_advantages: bool = True
    """Skip the forward and backward pass of completions whose advantage is 0: with ``beta=0``
    and no entropy bonus they add exactly nothing to the gradient. False runs every completion
    through the update, as TRL does (equal-work comparisons)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_clip_range(self.epsilon, self.epsilon_high)
        if self.num_generations < 2:
            raise ValueError(
                f"num_generations must be >= 2 (a group needs a baseline), got {self.num_generations}."
            )
        if self.episodes_per_iteration % self.num_generations:
            raise ValueError(
                f"episodes_per_iteration={self.episodes_per_iteration} must be a multiple of "
                f"num_generations={self.num_generations}; e.g. set episodes_per_iteration="
                f"{self.num_generations * max(1, self.episodes_per_iteration // self.num_generations)}."
            )
        if self.loss_type not in _LOSS_TYPES:
            raise ValueError(f"loss_type must be one of {_LOSS_TYPES}, got {self.loss_type!r}.")
        if self.scale_rewards not in ("group", "batch", "none"):
            raise ValueError(
                f"scale_rewards must be 'group', 'batch' or 'none', got {self.scale_rewards!r}."
            )
        if self.reward_source not in ("team", "agent"):
            raise ValueError(
                f"reward_source must be 'team' or 'agent', got {self.reward_source!r}."
            )
        if self.beta < 0:
            raise ValueError(f"beta must be >= 0, got {self.beta}.")
        if self.num_iterations < 1:
            raise ValueError(f"num_iterations must be >= 1, got {self.num_iterations}.")
        check_num_minibatches(self.num_minibatches, self.episodes_per_iteration)

    @property
    def groups_per_iteration(self) -> int:
        return self.episodes_per_iteration // self.num_generations


class GRPOTrainer(Trainer):
    """Group-relative policy optimisation over any registered env (no critic)."""

    algorithm: ClassVar[str] = "grpo"
    config_class: ClassVar[type[TrainerConfig]] = GRPOConfig
    config: GRPOConfig

    def shards_per_iteration(self) -> int:
        return self.config.groups_per_iteration

    def objective(self) -> Objective:
        c = self.config
        return Objective(
            level="token",
            normalizer=_NORMALIZERS[c.loss_type],
            epsilon=c.epsilon,
            epsilon_high=c.epsilon_high,
            entropy_coef=c.entropy_coef,
            beta=c.beta,
        )

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

    def _run_groups(self, n_groups: int, first_group: int) -> list[Episode]:
        """Draw ``n_groups`` tasks (alike on every rank) and run this rank's share of whole groups."""
        requests = self._group_requests(n_groups, first_group)
        share = self.dist.shard(n_groups)
        per = self.config.num_generations
        return self.collector.collect([r for g in share for r in requests[g * per : (g + 1) * per]])

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

    # ------------------------------------------------------------------ update
    def advantages(self, episodes: list[Episode]) -> dict[tuple[int, str], float]:
        """Group advantage of each (episode row, agent) that acted in the episode."""
        keys = self._acting_pairs(episodes)
        if not keys:
            return {}
        rewards, groups = self._group_rewards(episodes, keys)
        scale = self.config.scale_rewards
        if scale == "batch" and self.dist.enabled:
            # Groups are whole on each rank, but the batch's std spans every rank's rewards.
            adv = group_advantages(rewards, groups, scale_rewards="none")
            total, count = self.dist.sum([float(rewards.sum()), float(rewards.numel())])
            mean = total / count
            (squares,) = self.dist.sum([float(((rewards - mean) ** 2).sum())])
            std = (squares / (count - 1)) ** 0.5 if count > 1 else 0.0
            adv = adv / (std + 1e-4)
        else:
            adv = group_advantages(rewards, groups, scale_rewards=scale)
        return {key: float(a) for key, a in zip(keys, adv, strict=True)}

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
        rewards = torch.tensor(
            [self._rewards(episodes[row], agent) for row, agent in keys], dtype=torch.float32
        )
        groups = [(int(episodes[row].group or 0), agent) for row, agent in keys]
        return rewards, groups

    def _agents_with_work(self, agents: Sequence[str], active: torch.Tensor) -> list[str]:
        """The agents with an active decision on some rank, in the same order on every rank."""
        present = self.dist.sum(
            [
                float(any(on and a == agent for a, on in zip(agents, active.tolist(), strict=True)))
                for agent in self.agents
            ]
        )
        return [agent for agent, n in zip(self.agents, present, strict=True) if n]

    def update(self, episodes: list[Episode]) -> dict[str, Any]:
        c = self.config
        metrics: dict[str, Any] = {}
        keys = self._acting_pairs(episodes)
        flat, pairs = 0.0, float(len(keys))
        if keys:
            rewards, groups = self._group_rewards(episodes, keys)
            flat = float(zero_std_group_mask(rewards, groups).float().sum())
        flat, pairs = self.dist.sum([flat, pairs])
        if pairs:
            metrics["rollout/zero_std_fraction"] = flat / pairs
        table = self.advantages(episodes)
        trained = [a for a in self.agents if a in self._optimizer_of]
        batch = build_rollout_batch(
            episodes,
            agents=trained,
            token_caps=c.max_new_tokens_per_agent,
            default_cap=c.max_new_tokens,
        )
        if not self.dist.sum([len(batch)])[0]:
            return {**metrics, "train/policy_loss": 0.0, "train/skipped_empty": 1}
        advantages = torch.tensor(
            [
                table.get((int(row), agent), 0.0)
                for row, agent in zip(batch.episode, batch.agents, strict=True)
            ]
        )  # (N,)
        batch = batch.with_targets(advantages=advantages)
        # Zero-advantage rows add nothing to the surrogate; without entropy or KL terms they need no forward.
        active = (
            torch.ones(len(batch), dtype=torch.bool)
            if c.beta > 0 or c.entropy_coef > 0 or not c.skip_zero_advantages
            else advantages != 0
        )
        if not self._agents_with_work(batch.agents, active):
            # every group had equal rewards: nothing to learn, and no statistics to report
            return {**metrics, "train/policy_loss": 0.0, "train/skipped_empty": 1}

        step = self.policy_gradient()
        stats: dict[str, list[float]] = defaultdict(list)
        first: dict[str, float] = {}
        skipped = 0
        first_episode, total_episodes = self.dist.offset(len(episodes))
        for _ in range(c.num_iterations):
            for rows in batch.minibatch_indices(
                self.rng,
                c.num_minibatches,
                len(episodes),
                first_episode=first_episode,
                total_episodes=total_episodes,
            ):
                minibatch = batch[rows]
                agents = self._agents_with_work(minibatch.agents, active[rows])
                if not agents:  # no rank has a decision of this minibatch to train on
                    continue
                result = self.policy_step(step, minibatch, agents, active=active[rows])
                if not first:
                    first = {
                        "approx_kl": result["approx_kl"],
                        "clip_fraction": result["clip_fraction"],
                    }
                for key in ("policy_loss", "entropy", "kl", "ratio_mean"):
                    stats[f"train/{key}"].append(result[key])
                if "grad_norm" in result:
                    stats["train/grad_norm"].append(result["grad_norm"])
                skipped += int(result.get("skipped_nonfinite", 0))
        metrics.update({k: float(np.mean(v)) for k, v in stats.items() if v})
        metrics["train/approx_kl"] = first.get("approx_kl", 0.0)
        metrics["train/clip_fraction"] = first.get("clip_fraction", 0.0)
        metrics["train/skipped_nonfinite"] = skipped
        total, count = self.dist.sum([sum(abs(a) for a in table.values()), float(len(table))])
        metrics["train/advantage_abs_mean"] = total / count if count else 0.0
        return metrics
