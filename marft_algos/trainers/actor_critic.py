"""The PPO-style actor-critic update behind action-level MARFT, token-level MARFT and PPO.

Per iteration (paper Algorithm 3), read top to bottom in :meth:`ActorCriticTrainer.update`:

1. one padded :class:`~marft_algos.common.batch.RolloutBatch` of every decision;
2. critic values for every decision (action level) or every token (token level), and GAE over the
   flattened agent sequence (:mod:`marft_algos.trainers.levels`), optionally normalised per agent;
3. ``ppo_epochs`` passes over minibatches of shuffled episodes (drawn over global episode
   indices, so they are the same at any number of processes): each minibatch updates the
   critic, then every trained agent's adapter with the shared policy-gradient step
   (:class:`~marft_algos.trainers.policy_gradient.PolicyGradient`: clipped surrogate of paper eq. 5,
   entropy bonus, accumulation that leaves the gradient unchanged).

Options from the paper: agent-by-agent updates (one agent per window, cycling: the
``agent_schedule`` of :mod:`marft_algos.trainers.schedule`), a trust-region cut
(undo a policy step whose KL on its minibatch exceeds a threshold), action log-prob
normalisation, entropy bonus, Huber value loss.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Literal

import torch
from pettingzoo import AECEnv
from torch import Tensor

from marft_algos.common.batch import RolloutBatch
from marft_algos.common.losses import value_loss
from marft_algos.distributed import DistributedContext
from marft_algos.policy.rendering import render_prompt_ids
from marft_algos.protocols import CriticLike, PolicyLike, RolloutBackend
from marft_algos.rollout.collector import Episode
from marft_algos.trainers.actor_critic_config import ActorCriticConfig
from marft_algos.trainers.base import Trainer
from marft_algos.trainers.branched import BranchedActorCritic
from marft_algos.trainers.config import TrainerConfig
from marft_algos.trainers.levels import Level, level_named, normalize, normalize_by_agent
from marft_algos.trainers.policy_gradient import Objective
from marft_algos.trainers.stats import UpdateStats, advantage_abs_mean, agent_advantages

__all__ = ["ActorCriticConfig", "ActorCriticTrainer"]

logger = logging.getLogger(__name__)


class ActorCriticTrainer(BranchedActorCritic, Trainer):
    """Actor-critic PPO over the flattened agent sequence, at action or token granularity.

    Args:
        policy: The multi-agent policy.
        env_fn: Builds one training env copy.
        config: An :class:`ActorCriticConfig` (or subclass).
        critic: Value function with ``action_values(prompt_ids)`` / ``token_values(prompt_ids,
            action_ids)``, ``parameters()`` and a ``backbone`` with the tokenizer it reads
            (``marft_algos.policy.Critic``). Agents on another base model have their observations
            re-rendered in the critic's tokenizer (action level); at token level the critic
            must share every agent's vocabulary, since it scores the agents' own tokens.
        eval_env_fn: Builds one held-out env copy.
        distributed: Data-parallel context (default: the launcher's process group, else one process).
    """

    level: ClassVar[Literal["action", "token"]] = "action"
    config_class: ClassVar[type[TrainerConfig]] = ActorCriticConfig
    config: ActorCriticConfig
    critic_optimizer: torch.optim.Optimizer

    critic: CriticLike

    def __init__(
        self,
        policy: PolicyLike,
        env_fn: Callable[[], AECEnv],
        config: ActorCriticConfig,
        *,
        critic: CriticLike,
        eval_env_fn: Callable[[], AECEnv] | None = None,
        distributed: DistributedContext | None = None,
        rollout_backend: RolloutBackend | None = None,
    ) -> None:
        if critic is None:
            raise ValueError(
                f"{type(self).__name__} needs a critic: e.g. Critic(policy) from marft_algos.policy."
            )
        self.granularity: Level = level_named(self.level_of(config))
        """Action or token level, chosen once (see :mod:`marft_algos.trainers.levels`)."""
        config.refuse_ignored_settings(self.granularity.name)
        super().__init__(
            policy,
            env_fn,
            config,
            critic=critic,
            eval_env_fn=eval_env_fn,
            distributed=distributed,
            rollout_backend=rollout_backend,
        )
        self.critic_optimizer = torch.optim.Adam(
            list(critic.parameters()), lr=config.critic_learning_rate, eps=config.adam_eps
        )
        self._rerender = self._agents_needing_rerender()

    @classmethod
    def level_of(cls, config: ActorCriticConfig) -> str:
        """The granularity a config trains at: the trainer's own (PPO: the config's ``level``)."""
        return cls.level

    def objective(self) -> Objective:
        c = self.config
        return Objective(
            level=self.granularity.name,
            normalizer="token",
            epsilon=c.epsilon,
            epsilon_high=c.epsilon_high,
            entropy_coef=c.entropy_coef,
            logprob_normalization=c.logprob_normalization,
        )

    @property
    def trust_region_kl(self) -> float | None:
        return self.config.trust_region_kl

    # ------------------------------------------------------------------ the critic's view
    def _agents_needing_rerender(self) -> set[str]:
        """Agents whose prompt ids the critic cannot read as they are (another base model)."""
        critic_backbone = getattr(self.critic, "backbone", None)
        if critic_backbone is None:
            return set()
        foreign = {a for a in self.agents if self.policy.backbone(a) is not critic_backbone}
        if foreign and self.granularity.name == "token":
            vocab = critic_backbone.tokenizer.get_vocab()
            clash = sorted(a for a in foreign if self.policy.tokenizer(a).get_vocab() != vocab)
            if clash:
                raise ValueError(
                    f"Token-level values score each agent's own tokens, but agents {clash} use a "
                    f"tokenizer other than the critic's ({critic_backbone.name!r}). Give the critic "
                    f"the same base model as those agents, or train the team at action level "
                    f"(ActionMARFTTrainer), where the critic re-renders each observation itself."
                )
        return foreign

    def critic_prompt_ids(self, episodes: Sequence[Episode]) -> list[list[int]] | None:
        """Every decision's observation in the critic's tokenizer (None: the agents' ids serve)."""
        if not self._rerender or self.granularity.name == "token":
            return None
        tokenizer = self.critic.backbone.tokenizer
        out = []
        for e in episodes:
            for d in e.decisions:
                if d.agent not in self._rerender:
                    out.append(list(d.prompt_ids))
                elif not d.messages:
                    raise ValueError(
                        f"Agent {d.agent!r} acts on another base model than the critic, and its "
                        f"decision kept no messages to re-render; collect episodes with "
                        f"marft_algos.rollout.collector.RolloutCollector."
                    )
                else:
                    out.append(
                        render_prompt_ids(tokenizer, {"messages": d.messages, "tools": d.tools})
                    )
        return out

    # ------------------------------------------------------------------ values and advantages
    @torch.no_grad()
    def rollout_values(self, batch: RolloutBatch) -> Tensor:
        """Critic values of every decision (``(N,)``) or token (``(N, T)``), in chunks."""
        level = self.granularity
        shape = (len(batch),) if level.name == "action" else tuple(batch.action_mask.shape)
        values = torch.zeros(shape)
        start = 0
        for chunk in self._critic_chunks(batch):
            if chunk is None:
                self._critic_filler()
                continue
            v = level.values(self.critic, chunk).cpu()
            if v.dim() == 2:
                values[start : start + len(chunk), : v.shape[1]] = v
            else:
                values[start : start + len(chunk)] = v
            start += len(chunk)
        return values

    def prepare_batch(self, episodes: Sequence[Episode]) -> RolloutBatch:
        """The update's batch: decisions, critic values, advantages and return targets."""
        c = self.config
        level = self.granularity
        batch = self.rollout_batch(episodes)
        critic_prompts = self.critic_prompt_ids(episodes)
        if critic_prompts is not None:
            batch = batch.with_targets(
                advantages=torch.zeros(len(batch)), critic_prompt_ids=critic_prompts
            )
        values = self.rollout_values(batch)
        advantages, returns = level.targets(episodes, self.branch_values(episodes, values), c)
        batch, values, advantages, returns, critic_prompts = self.trained_once(
            episodes, batch, values, advantages, returns, critic_prompts
        )  # with branch: each decision of a shared prefix once (GAE read the copies)
        if c.normalize_advantages:
            mask = level.mask(batch)
            if c.normalize_advantages_per_agent:
                advantages = normalize_by_agent(
                    advantages, mask, batch.agents, self.dist, self.agents
                )
            else:
                advantages = normalize(advantages, mask, self.dist)
        return batch.with_targets(
            advantages=advantages, values=values, returns=returns, critic_prompt_ids=critic_prompts
        )

    # ------------------------------------------------------------------ the update
    def single_policy_step(self) -> bool:
        return self.config.ppo_epochs == 1 and self.config.num_minibatches == 1

    def update(self, episodes: list[Episode]) -> dict[str, Any]:
        c = self.config
        batch = self.prepare_batch(episodes)
        train_agents = self.agents_to_train()
        step = self.policy_gradient()
        stats = UpdateStats(train_agents)
        first_episode, total_episodes = self.dist.offset(len(episodes))
        for _ in range(c.ppo_epochs):
            for minibatch in batch.minibatches(
                self.rng,
                c.num_minibatches,
                len(episodes),
                first_episode=first_episode,
                total_episodes=total_episodes,
            ):
                stats.add_value_loss(self.critic_step(minibatch))
                rows = [k for k, a in enumerate(minibatch.agents) if a in train_agents]
                if not self.dist.sum([len(rows)])[0]:  # no rank has a decision to train on
                    continue
                stats.add_step(self.policy_step(step, minibatch[rows], train_agents))
        metrics = {
            **stats.metrics(),
            **self.learning_rate_metrics(),
            **self.branch_metrics(episodes),
        }
        assert batch.values is not None and batch.advantages is not None
        mask = self.granularity.mask(batch)
        values, count = self.dist.sum([float(batch.values[mask].sum()), float(mask.sum())])
        metrics["train/value_mean"] = values / count if count else float("nan")
        trained = torch.tensor([a in train_agents for a in batch.agents], dtype=torch.bool)
        entries = mask & (trained if mask.dim() == 1 else trained.unsqueeze(-1))
        metrics.update(advantage_abs_mean(batch.advantages, entries, self.dist))
        metrics.update(
            agent_advantages(batch.advantages, entries, batch.agents, train_agents, self.dist)
        )
        return metrics

    def _critic_chunks(self, batch: RolloutBatch) -> list[RolloutBatch | None]:
        """The critic's chunks of ``batch``; under ``--fsdp`` padded with None to as many as the
        rank with the most (:meth:`~marft_algos.distributed.DistributedContext.lockstep`)."""
        c = self.config
        chunks = list(batch.chunks(c.gradient_accumulation_steps, c.max_chunk_tokens))
        return [chunk for _, chunk in self.dist.lockstep({"critic": chunks}, ["critic"])]

    def _critic_filler(self, *, backward: bool = False) -> None:
        """Under ``--fsdp``, a critic pass over one token standing for a chunk this rank lacks
        (its loss counts 0)."""
        assert self.critic is not None
        if self.granularity.name == "action":
            values = self.critic.action_values([[0]])
        else:
            values = self.critic.token_values([[0]], [[0]])
        if backward and values.requires_grad:
            (values.sum() * 0.0).backward()

    def critic_step(self, batch: RolloutBatch) -> float:
        """One critic step on a minibatch (accumulated in chunks); returns the value loss."""
        c = self.config
        level = self.granularity
        optimizer = self.critic_optimizer
        optimizer.zero_grad(set_to_none=True)
        (total_units,) = self.dist.sum([level.units(batch)])  # weights from the global minibatch
        if not total_units:
            return float("nan")
        loss_value = 0.0
        finite = True
        for chunk in self._critic_chunks(batch):
            if chunk is None or not finite:  # --fsdp: every rank runs as many passes
                self._critic_filler(backward=True)
                continue
            assert chunk.values is not None and chunk.returns is not None
            new = level.values(self.critic, chunk)
            width = new.shape[1] if new.dim() == 2 else None
            old = chunk.values if width is None else chunk.values[:, :width]
            target = chunk.returns if width is None else chunk.returns[:, :width]
            mask = None if width is None else chunk.action_mask[:, :width].to(new.device)
            units = level.units(chunk)
            loss = value_loss(
                new,
                old.to(new.device),
                target.to(new.device),
                mask,
                huber_delta=c.huber_delta if c.value_loss == "huber" else None,
                clip_range=c.value_clip,
            )
            scaled = c.value_loss_coef * loss * (units / total_units)
            if not torch.isfinite(scaled):
                finite = False
                if not self.dist.sharded:
                    break
                (new.nan_to_num().sum() * 0.0).backward()
                continue
            scaled.backward()
            loss_value += float(loss.detach()) * units / total_units
        params = [p for g in optimizer.param_groups for p in g["params"]]
        loss_value, all_finite = self.dist.sum([loss_value if finite else 0.0, float(finite)])
        if all_finite < self.dist.world_size:
            logger.warning(
                "Skipping a critic update at iteration %d: the value loss is not finite.",
                self.iteration,
            )
            optimizer.zero_grad(set_to_none=True)
            return float("nan")
        self.dist.sum_gradients(params)
        norm = torch.nn.utils.clip_grad_norm_(params, c.max_grad_norm)
        if torch.isfinite(norm):
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss_value
