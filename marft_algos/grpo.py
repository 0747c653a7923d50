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
import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np
import torch

from marft_algos.common.advantages import group_advantages, zero_std_group_mask
from marft_algos.common.buffers import chunk_indices, pad_rows
from marft_algos.common.losses import aggregate_loss, kl_k3, masked_mean, ppo_clip_loss
from marft_algos.rollout import Episode, EpisodeRequest
from marft_algos.trainer import Trainer, TrainerConfig

__all__ = ["GRPOConfig", "GRPOTrainer"]

logger = logging.getLogger(__name__)

_LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo")


@dataclass
class GRPOConfig(TrainerConfig):
    """Settings of :class:`GRPOTrainer` (names and defaults as TRL's ``GRPOConfig``)."""

    num_generations: int = 8
    """Episodes per task (the group size G)."""
    beta: float = 0.0
    """Weight of the k3 KL to the reference policy (0: no reference forward pass)."""
    epsilon: float = 0.2
    """Lower clip range ε_low."""
    epsilon_high: float | None = None
    """Upper clip range ε_high (DAPO clip-higher, e.g. 0.28); None: equal to epsilon."""
    loss_type: Literal["grpo", "bnpo", "dr_grpo", "dapo"] = "dapo"
    """Loss aggregation: per-sequence means (grpo), token-level over the batch (bnpo, dapo), or a
    constant length (dr_grpo)."""
    scale_rewards: Literal["group", "batch", "none"] = "group"
    """Divide advantages by the group's reward std, the batch's, or not at all."""
    num_iterations: int = 1
    """Optimisation passes over each batch (μ)."""
    gradient_accumulation_steps: int = 1
    """Chunks each agent's share of a batch is split into (bounds memory; same gradient)."""
    dynamic_sampling: bool = False
    """DAPO: drop groups whose rewards are all equal and sample more groups to refill the batch."""
    max_resample_rounds: int = 4
    """With dynamic sampling: extra sampling rounds at most before training on a short batch."""
    reward_source: Literal["team", "agent"] = "team"
    """R_i of an agent: the episode's team return, or the agent's own credited return."""
    entropy_coef: float = 0.0
    """Entropy bonus weight (GRPO uses none)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.num_generations < 2:
            raise ValueError(f"num_generations must be >= 2 (a group needs a baseline), got {self.num_generations}.")
        if self.episodes_per_iteration % self.num_generations:
            raise ValueError(
                f"episodes_per_iteration={self.episodes_per_iteration} must be a multiple of "
                f"num_generations={self.num_generations}; e.g. set episodes_per_iteration="
                f"{self.num_generations * max(1, self.episodes_per_iteration // self.num_generations)}."
            )
        if self.loss_type not in _LOSS_TYPES:
            raise ValueError(f"loss_type must be one of {_LOSS_TYPES}, got {self.loss_type!r}.")
        if self.scale_rewards not in ("group", "batch", "none"):
            raise ValueError(f"scale_rewards must be 'group', 'batch' or 'none', got {self.scale_rewards!r}.")
        if self.reward_source not in ("team", "agent"):
            raise ValueError(f"reward_source must be 'team' or 'agent', got {self.reward_source!r}.")
        if self.beta < 0:
            raise ValueError(f"beta must be >= 0, got {self.beta}.")
        if self.num_iterations < 1 or self.gradient_accumulation_steps < 1:
            raise ValueError("num_iterations and gradient_accumulation_steps must be >= 1.")

    @property
    def groups_per_iteration(self) -> int:
        return self.episodes_per_iteration // self.num_generations


class GRPOTrainer(Trainer):
    """Group-relative policy optimisation over any registered env (no critic)."""

    algorithm: ClassVar[str] = "grpo"
    config_class: ClassVar[type[TrainerConfig]] = GRPOConfig

    @property
    def cfg(self) -> GRPOConfig:
        assert isinstance(self.config, GRPOConfig)
        return self.config

    # ------------------------------------------------------------------ sampling
    def _group_requests(self, n_groups: int, first_group: int) -> list[EpisodeRequest]:
        seeds = self.collector.rng.integers(0, 2**31 - 1, size=n_groups)
        return [
            EpisodeRequest(seed=int(seed), group=first_group + g)
            for g, seed in enumerate(seeds)
            for _ in range(self.cfg.num_generations)
        ]

    def _rewards(self, episode: Episode, agent: str) -> float:
        if self.cfg.reward_source == "team":
            return episode.team_return
        return episode.agent_returns.get(agent, 0.0)

    def _informative_groups(self, episodes: list[Episode]) -> set[int]:
        """Groups in which some agent's rewards differ (the others give zero advantages)."""
        keep = set()
        by_group: dict[int, list[Episode]] = defaultdict(list)
        for e in episodes:
            by_group[int(e.group)].append(e)
        for group, members in by_group.items():
            for agent in self.agents:
                rewards = {self._rewards(e, agent) for e in members if any(d.agent == agent for d in e.decisions)}
                if len(rewards) > 1:
                    keep.add(group)
                    break
        return keep

    def collect(self) -> list[Episode]:
        c = self.cfg
        episodes = self.collector.collect(self._group_requests(c.groups_per_iteration, 0))
        self._sampling_stats = {"rollout/groups_dropped": 0, "rollout/resample_rounds": 0}
        if not c.dynamic_sampling:
            return episodes
        kept = self._informative_groups(episodes)
        pool = [e for e in episodes if e.group in kept]
        dropped = c.groups_per_iteration - len(kept)
        next_group = c.groups_per_iteration
        rounds = 0
        while len(kept) < c.groups_per_iteration and rounds < c.max_resample_rounds:
            more = self.collector.collect(self._group_requests(c.groups_per_iteration - len(kept), next_group))
            next_group += c.groups_per_iteration
            new = self._informative_groups(more)
            dropped += len({e.group for e in more}) - len(new)
            pool += [e for e in more if e.group in new]
            kept |= new
            rounds += 1
        wanted = sorted(kept)[: c.groups_per_iteration]
        self._sampling_stats = {"rollout/groups_dropped": dropped, "rollout/resample_rounds": rounds}
        if not wanted:
            logger.warning("Dynamic sampling found no group with differing rewards; this iteration has nothing to learn.")
        return [e for e in pool if e.group in set(wanted)]

    # ------------------------------------------------------------------ update
    def advantages(self, episodes: list[Episode]) -> dict[tuple[int, str], float]:
        """Group advantage of each (episode row, agent) that acted in the episode."""
        keys = [(row, agent) for row, e in enumerate(episodes) for agent in self.agents if any(d.agent == agent for d in e.decisions)]
        if not keys:
            return {}
        rewards = torch.tensor([self._rewards(episodes[row], agent) for row, agent in keys], dtype=torch.float32)
        groups = [(int(episodes[row].group), agent) for row, agent in keys]
        adv = group_advantages(rewards, groups, scale_rewards=self.cfg.scale_rewards)
        self._zero_std = float(zero_std_group_mask(rewards, groups).float().mean())
        return {key: float(a) for key, a in zip(keys, adv, strict=True)}

    def update(self, episodes: list[Episode]) -> dict[str, Any]:
        c = self.cfg
        metrics: dict[str, Any] = dict(getattr(self, "_sampling_stats", {}))
        adv = self.advantages(episodes)
        metrics["rollout/zero_std_fraction"] = getattr(self, "_zero_std", float("nan"))
        items = [
            (d, adv[(row, d.agent)])
            for row, e in enumerate(episodes)
            for d in e.decisions
            if d.agent in self._optimizer_of and (row, d.agent) in adv
        ]
        if not items:
            return {**metrics, "train/policy_loss": 0.0, "train/skipped_empty": 1}
        total_tokens = sum(len(d.action_ids) for d, _ in items)
        total_rows = len(items)
        needs_all = c.beta > 0 or c.entropy_coef > 0
        active = [(d, a) for d, a in items if needs_all or a != 0.0]
        if not active:  # every group had equal rewards: nothing to learn, and no statistics to report
            return {**metrics, "train/policy_loss": 0.0, "train/skipped_empty": 1}
        active_tokens = sum(len(d.action_ids) for d, _ in active)

        stats: dict[str, list[float]] = defaultdict(list)
        first: dict[str, float] = {}
        skipped = 0
        for it in range(c.num_iterations):
            totals: dict[str, float] = defaultdict(float)
            by_agent: dict[str, list[tuple[Any, float]]] = defaultdict(list)
            for d, a in active:
                by_agent[d.agent].append((d, a))
            for agent, entries in by_agent.items():
                for chunk in chunk_indices(range(len(entries)), c.gradient_accumulation_steps):
                    part = [entries[i] for i in chunk]
                    self._chunk_backward(agent, part, total_tokens, total_rows, active_tokens, totals)
            if it == 0:
                first = {"approx_kl": totals["approx_kl"], "clip_fraction": totals["clip_fraction"]}
            for key in ("policy_loss", "entropy", "kl", "ratio_mean"):
                stats[f"train/{key}"].append(totals[key])
            if not math.isfinite(totals["loss"]):
                logger.warning("Skipping a GRPO update at iteration %d: the loss is %s.", self.iteration, totals["loss"])
                self.zero_grad()
                skipped += 1
                continue
            grad_norm, applied = self.step_policy(list(by_agent))
            skipped += int(not applied)
            stats["train/grad_norm"].append(grad_norm)
        metrics.update({k: float(np.mean(v)) for k, v in stats.items() if v})
        metrics["train/approx_kl"] = first.get("approx_kl", 0.0)
        metrics["train/clip_fraction"] = first.get("clip_fraction", 0.0)
        metrics["train/skipped_nonfinite"] = skipped
        metrics["train/advantage_abs_mean"] = float(np.mean([abs(a) for _, a in items]))
        return metrics

    def _chunk_backward(
        self, agent, part, total_tokens: int, total_rows: int, active_tokens: int, totals: dict[str, float]
    ) -> None:
        c = self.cfg
        prompts = [d.prompt_ids for d, _ in part]
        actions = [d.action_ids for d, _ in part]
        out = self.policy.token_log_probs(agent, prompts, actions, with_entropy=True)
        device = out.log_probs.device
        mask = out.mask
        old = pad_rows([d.log_probs for d, _ in part])[0].to(device=device, dtype=out.log_probs.dtype)
        advantages = torch.tensor([a for _, a in part], dtype=torch.float32, device=device)  # (B,)
        if c.loss_type in ("dapo", "bnpo"):
            kind, weight, extra = "dapo", 1.0, {"num_items_in_batch": total_tokens}
        elif c.loss_type == "grpo":
            kind, weight, extra = "sequence_mean", len(part) / total_rows, {}
        else:
            kind, weight, extra = "dr_grpo", len(part) / total_rows, {"max_completion_length": c.max_new_tokens}
        loss, st = ppo_clip_loss(
            out.log_probs, old, advantages, mask, epsilon=c.epsilon, epsilon_high=c.epsilon_high, loss_type=kind, **extra
        )
        objective = loss
        kl_value = 0.0
        if c.beta > 0:
            with torch.no_grad():
                ref = self.policy.token_log_probs(agent, prompts, actions, reference=True).log_probs
            kl = aggregate_loss(kl_k3(out.log_probs, ref), mask, kind, **extra)
            objective = objective + c.beta * kl
            kl_value = float(kl.detach())
        entropy = masked_mean(out.entropy, mask)
        objective = (objective - c.entropy_coef * entropy) * weight
        if torch.isfinite(objective):
            objective.backward()
        units = int(mask.sum()) / active_tokens  # statistics average over the tokens actually processed
        totals["loss"] += float(objective.detach())
        totals["policy_loss"] += float(loss.detach()) * weight
        totals["kl"] += kl_value * weight
        totals["entropy"] += float(entropy.detach()) * units
        totals["approx_kl"] += float(st["approx_kl"]) * units
        totals["clip_fraction"] += float(st["clip_fraction"]) * units
        totals["ratio_mean"] += float(st["ratio_mean"]) * units
