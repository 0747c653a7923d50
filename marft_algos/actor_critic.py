"""The PPO-style actor-critic update behind action-level MARFT, token-level MARFT and PPO.

Per iteration (paper Algorithm 3): values for every decision (action level: one per rollout
observation) or every token (token level), GAE over the flattened agent sequence
(:mod:`marft_algos.common.advantages`), then ``ppo_epochs`` passes over shuffled minibatches.
Each minibatch first updates the critic, then every trained agent's adapter with the clipped
surrogate (paper eq. 5) of that agent's action (or token) probabilities. A minibatch is processed
in ``gradient_accumulation_steps`` chunks per agent whose losses are weighted so the gradient equals
the whole minibatch's. Options from the paper: agent-by-agent updates (one agent per window,
cycling), a trust-region cut (skip the policy step when approx-KL exceeds a threshold), action
log-prob normalisation, entropy bonus, Huber value loss.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np
import torch
from pettingzoo import AECEnv
from torch import Tensor

from marft_algos.common.advantages import action_level_gae, normalize_advantages, token_level_gae
from marft_algos.common.buffers import (
    chunk_indices,
    decision_layout,
    pad_rows,
    scatter_rows,
    token_layout,
)
from marft_algos.common.losses import action_log_prob, masked_mean, ppo_clip_loss, value_loss
from marft_algos.rollout import Decision, Episode
from marft_algos.trainer import Trainer, TrainerConfig

__all__ = ["ActorCriticConfig", "ActorCriticTrainer"]

logger = logging.getLogger(__name__)


@dataclass
class ActorCriticConfig(TrainerConfig):
    """Settings of the actor-critic trainers (defaults: paper Table 3)."""

    critic_learning_rate: float = 1e-5
    """Adam learning rate of the critic head (paper: 1e-5)."""
    gamma: float = 0.99
    """Discount γ between decisions (paper: 0.99)."""
    gae_lambda: float = 0.95
    """GAE λ (paper: 0.95)."""
    intra_round_discount: bool = True
    """Apply γ and λ between agents inside a round, as the reference implementation does."""
    gamma_token: float = 1.0
    """Token level: discount between tokens of one action (1: reward is not diluted by length)."""
    epsilon: float = 0.2
    """PPO clip range ε (paper: 0.2); the lower bound with ``epsilon_high``."""
    epsilon_high: float | None = None
    """Upper clip range (DAPO clip-higher); None means symmetric clipping."""
    entropy_coef: float = 0.1
    """Entropy bonus weight (paper: 0.1; 0.01 and 0 in other runs)."""
    value_loss: Literal["huber", "mse"] = "huber"
    """Critic loss (paper: Huber)."""
    huber_delta: float = 10.0
    """Huber threshold."""
    value_clip: float | None = None
    """Clip value updates to this range around the rollout values (None: off)."""
    value_loss_coef: float = 1.0
    """Weight of the critic loss (paper: 1)."""
    ppo_epochs: int = 1
    """Passes over each rollout batch (paper: 1)."""
    num_minibatches: int = 1
    """Minibatches per pass (paper: 1)."""
    gradient_accumulation_steps: int = 1
    """Chunks each agent's share of a minibatch is split into (bounds memory; same gradient)."""
    normalize_advantages: bool = True
    """Standardise advantages over the batch."""
    agent_by_agent_interval: int = 0
    """> 0: train one agent at a time, switching every this many iterations (paper §4.1.1)."""
    trust_region_kl: float | None = None
    """Skip a minibatch's policy step when its approx-KL exceeds this (paper App. A); None: off."""
    logprob_normalization: Literal["none", "token", "word"] = "none"
    """Action level: divide an action's log-prob by its token or word count (paper §4.1.1)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 <= self.gamma <= 1 or not 0 <= self.gae_lambda <= 1 or not 0 <= self.gamma_token <= 1:
            raise ValueError(
                f"gamma, gae_lambda and gamma_token must be in [0, 1]; got {self.gamma}, "
                f"{self.gae_lambda}, {self.gamma_token}."
            )
        if self.epsilon <= 0 or (self.epsilon_high is not None and self.epsilon_high <= 0):
            raise ValueError(f"epsilon and epsilon_high must be > 0; got {self.epsilon}, {self.epsilon_high}.")
        for name in ("ppo_epochs", "num_minibatches", "gradient_accumulation_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}.")
        if self.num_minibatches > self.episodes_per_iteration:
            raise ValueError(
                f"num_minibatches={self.num_minibatches} exceeds episodes_per_iteration="
                f"{self.episodes_per_iteration}; lower num_minibatches or collect more episodes."
            )
        if self.value_loss not in ("huber", "mse"):
            raise ValueError(f"value_loss must be 'huber' or 'mse', got {self.value_loss!r}.")
        if self.logprob_normalization not in ("none", "token", "word"):
            raise ValueError(
                f"logprob_normalization must be 'none', 'token' or 'word', got {self.logprob_normalization!r}."
            )
        if self.agent_by_agent_interval < 0:
            raise ValueError(f"agent_by_agent_interval must be >= 0, got {self.agent_by_agent_interval}.")
        if self.trust_region_kl is not None and self.trust_region_kl <= 0:
            raise ValueError(f"trust_region_kl must be > 0 or None, got {self.trust_region_kl}.")


class ActorCriticTrainer(Trainer):
    """Actor-critic PPO over the flattened agent sequence, at action or token granularity.

    Args:
        policy: The multi-agent policy.
        env_fn: Builds one training env copy.
        config: An :class:`ActorCriticConfig` (or subclass).
        critic: Value function with ``action_values(prompt_ids)`` / ``token_values(prompt_ids,
            action_ids)`` and ``parameters()`` (``marft_algos.policy.Critic``).
        eval_env_fn: Builds one held-out env copy.
    """

    level: ClassVar[Literal["action", "token"]] = "action"
    config_class: ClassVar[type[TrainerConfig]] = ActorCriticConfig

    def __init__(
        self,
        policy: Any,
        env_fn: Callable[[], AECEnv],
        config: ActorCriticConfig,
        *,
        critic: Any,
        eval_env_fn: Callable[[], AECEnv] | None = None,
    ) -> None:
        if critic is None:
            raise ValueError(
                f"{type(self).__name__} needs a critic: e.g. Critic(policy) from marft_algos.policy."
            )
        super().__init__(policy, env_fn, config, critic=critic, eval_env_fn=eval_env_fn)
        self.optimizers[self.CRITIC_KEY] = torch.optim.Adam(
            list(critic.parameters()), lr=config.critic_learning_rate, eps=config.adam_eps
        )

    @property
    def cfg(self) -> ActorCriticConfig:
        assert isinstance(self.config, ActorCriticConfig)
        return self.config

    # ------------------------------------------------------------------ values and advantages
    @torch.no_grad()
    def _values(self, decisions: Sequence[Decision]) -> list[Tensor]:
        """Rollout values: a 0-d tensor per decision (action level) or a (T_k,) vector (token level)."""
        out: list[Tensor] = []
        step = max(1, len(decisions) // self.cfg.gradient_accumulation_steps)
        for start in range(0, len(decisions), step):
            chunk = decisions[start : start + step]
            prompts = [d.prompt_ids for d in chunk]
            if self.level == "action":
                out.extend(self.critic.action_values(prompts).float().cpu().unbind(0))
            else:
                values = self.critic.token_values(prompts, [d.action_ids for d in chunk]).float().cpu()
                out.extend(values[i, : len(d.action_ids)] for i, d in enumerate(chunk))
        return out

    def _advantages(self, episodes: Sequence[Episode], decisions: Sequence[Decision], values: Sequence[Tensor]):
        """Per-decision advantages and return targets (0-d or (T_k,) tensors, like ``values``)."""
        c = self.cfg
        if self.level == "action":
            layout = decision_layout(episodes)
            grid = torch.zeros(layout.rewards.shape)
            rows, cols = zip(*layout.index, strict=True)
            grid[list(rows), list(cols)] = torch.stack(list(values))
            adv, ret = action_level_gae(
                layout.rewards, grid, layout.round_end, layout.dones, 0.0,
                gamma=c.gamma, lam=c.gae_lambda, valid=layout.valid, intra_round_discount=c.intra_round_discount,
            )
            flat_adv = adv[list(rows), list(cols)]
            if c.normalize_advantages and len(flat_adv) > 1:
                flat_adv = normalize_advantages(flat_adv)
            return list(flat_adv.unbind(0)), list(ret[list(rows), list(cols)].unbind(0))
        layout = token_layout(episodes)
        grid = scatter_rows(values, layout.spans, tuple(layout.rewards.shape))
        adv, ret = token_level_gae(
            layout.rewards, grid, layout.action_end, layout.round_end, layout.dones, 0.0,
            gamma=c.gamma, lam=c.gae_lambda, gamma_token=c.gamma_token, valid=layout.valid,
            intra_round_discount=c.intra_round_discount,
        )
        if c.normalize_advantages and int(layout.valid.sum()) > 1:
            adv = normalize_advantages(adv, layout.valid)
        advs = [adv[row, col : col + n] for row, col, n in layout.spans]
        rets = [ret[row, col : col + n] for row, col, n in layout.spans]
        return advs, rets

    # ------------------------------------------------------------------ the update
    def agents_to_train(self) -> list[str]:
        """All trainable agents, or the current one under agent-by-agent updates."""
        trainable = self.trainable_agents()
        interval = self.cfg.agent_by_agent_interval
        if interval <= 0:
            return trainable
        return [trainable[(self.iteration // interval) % len(trainable)]]

    def update(self, episodes: list[Episode]) -> dict[str, Any]:
        c = self.cfg
        decisions = [d for e in episodes for d in e.decisions]
        rows = [row for row, e in enumerate(episodes) for _ in e.decisions]  # decision -> episode row
        values = self._values(decisions)
        advantages, returns = self._advantages(episodes, decisions, values)
        train_agents = set(self.agents_to_train())

        stats: dict[str, list[float]] = defaultdict(list)
        first: dict[str, float] = {}
        skipped_trust = skipped_nonfinite = 0
        order = np.arange(len(episodes))
        for epoch in range(c.ppo_epochs):
            self.rng.shuffle(order)
            for mb_index, episode_ids in enumerate(np.array_split(order, c.num_minibatches)):
                members = {int(i) for i in episode_ids}
                batch = [k for k, row in enumerate(rows) if row in members]
                if not batch:
                    continue
                stats["train/value_loss"].append(self._critic_step(batch, decisions, values, returns))
                policy_batch = [k for k in batch if decisions[k].agent in train_agents]
                if not policy_batch:
                    continue
                mb = self._policy_backward(policy_batch, decisions, advantages)
                if epoch == 0 and mb_index == 0:
                    first = {"approx_kl": mb["approx_kl"], "clip_fraction": mb["clip_fraction"]}
                for key in ("policy_loss", "entropy", "ratio_mean"):
                    stats[f"train/{key}"].append(mb[key])
                stats["train/approx_kl_last"].append(mb["approx_kl"])
                if not math.isfinite(mb["loss"]):
                    logger.warning("Skipping a policy update at iteration %d: the loss is %s.", self.iteration, mb["loss"])
                    self.zero_grad()
                    skipped_nonfinite += 1
                    continue
                if c.trust_region_kl is not None and mb["approx_kl"] > c.trust_region_kl:
                    self.zero_grad()
                    skipped_trust += 1
                    continue
                grad_norm, applied = self.step_policy(sorted(train_agents))
                skipped_nonfinite += int(not applied)
                stats["train/grad_norm"].append(grad_norm)

        metrics: dict[str, Any] = {k: float(np.mean(v)) for k, v in stats.items() if v}
        metrics["train/approx_kl"] = first.get("approx_kl", float("nan"))
        metrics["train/clip_fraction"] = first.get("clip_fraction", float("nan"))
        metrics["train/skipped_trust_region"] = skipped_trust
        metrics["train/skipped_nonfinite"] = skipped_nonfinite
        metrics["train/agents"] = ",".join(sorted(train_agents))
        metrics["train/value_mean"] = float(torch.cat([v.reshape(-1) for v in values]).mean())
        metrics["train/advantage_abs_mean"] = float(torch.cat([a.reshape(-1) for a in advantages]).abs().mean())
        return metrics

    def _critic_step(self, batch: list[int], decisions, values, returns) -> float:
        c = self.cfg
        optimizer = self.optimizers[self.CRITIC_KEY]
        optimizer.zero_grad(set_to_none=True)
        total_units = sum(1 if self.level == "action" else len(decisions[k].action_ids) for k in batch)
        loss_value = 0.0
        for chunk in chunk_indices(batch, c.gradient_accumulation_steps):
            prompts = [decisions[k].prompt_ids for k in chunk]
            if self.level == "action":
                new = self.critic.action_values(prompts)
                old = torch.stack([values[k] for k in chunk])
                target = torch.stack([returns[k] for k in chunk])
                mask = None
                units = len(chunk)
            else:
                actions = [decisions[k].action_ids for k in chunk]
                new = self.critic.token_values(prompts, actions)
                old, mask = pad_rows([values[k].tolist() for k in chunk])
                target, _ = pad_rows([returns[k].tolist() for k in chunk])
                new = new[:, : old.shape[1]]
                units = int(mask.sum())
            loss = value_loss(
                new, old.to(new.device), target.to(new.device), None if mask is None else mask.to(new.device),
                huber_delta=c.huber_delta if c.value_loss == "huber" else None, clip_range=c.value_clip,
            )
            scaled = c.value_loss_coef * loss * (units / total_units)
            if not torch.isfinite(scaled):
                logger.warning("Skipping a critic update at iteration %d: the value loss is not finite.", self.iteration)
                optimizer.zero_grad(set_to_none=True)
                return float("nan")
            scaled.backward()
            loss_value += float(loss.detach()) * units / total_units
        params = [p for g in optimizer.param_groups for p in g["params"]]
        norm = torch.nn.utils.clip_grad_norm_(params, c.max_grad_norm)
        if torch.isfinite(norm):
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss_value

    def _policy_backward(self, batch: list[int], decisions, advantages) -> dict[str, float]:
        """Backpropagate the minibatch's clipped surrogate; returns weighted statistics."""
        c = self.cfg
        by_agent: dict[str, list[int]] = defaultdict(list)
        for k in batch:
            by_agent[decisions[k].agent].append(k)
        total_units = sum(1 if self.level == "action" else len(decisions[k].action_ids) for k in batch)
        totals = defaultdict(float)
        for agent, ks in by_agent.items():
            for chunk in chunk_indices(ks, c.gradient_accumulation_steps):
                chunk_decisions = [decisions[k] for k in chunk]
                out = self.policy.token_log_probs(
                    agent,
                    [d.prompt_ids for d in chunk_decisions],
                    [d.action_ids for d in chunk_decisions],
                    with_entropy=True,
                )
                device = out.log_probs.device
                mask = out.mask
                old_tokens, _ = pad_rows([d.log_probs for d in chunk_decisions])
                old_tokens = old_tokens.to(device)
                if self.level == "action":
                    words = torch.tensor([max(1, len(d.text.split())) for d in chunk_decisions], dtype=torch.float32)
                    new = action_log_prob(out.log_probs, mask, c.logprob_normalization, words.to(device))
                    old = action_log_prob(old_tokens, mask, c.logprob_normalization, words.to(device))
                    adv = torch.stack([advantages[k] for k in chunk]).to(device)
                    loss, st = ppo_clip_loss(new, old, adv, epsilon=c.epsilon, epsilon_high=c.epsilon_high)
                    units = len(chunk)
                else:
                    adv, _ = pad_rows([advantages[k].tolist() for k in chunk])
                    units = int(mask.sum())
                    loss, st = ppo_clip_loss(
                        out.log_probs, old_tokens, adv.to(device), mask,
                        epsilon=c.epsilon, epsilon_high=c.epsilon_high, loss_type="dapo", num_items_in_batch=units,
                    )
                entropy = masked_mean(out.entropy, mask)
                weight = units / total_units
                objective = (loss - c.entropy_coef * entropy) * weight
                if torch.isfinite(objective):
                    objective.backward()
                totals["loss"] += float(objective.detach())
                totals["policy_loss"] += float(loss.detach()) * weight
                totals["entropy"] += float(entropy.detach()) * weight
                totals["approx_kl"] += float(st["approx_kl"]) * weight
                totals["clip_fraction"] += float(st["clip_fraction"]) * weight
                totals["ratio_mean"] += float(st["ratio_mean"]) * weight
        return dict(totals)
