"""The policy step every trainer takes, as a part of :class:`~marft_algos.trainers.base.Trainer`:
its objective and :class:`~marft_algos.trainers.policy_gradient.PolicyGradient`, the guarded
optimizer step (non-finite steps skipped or undone, the trust-region cut), and the optimizers."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any, ClassVar

import torch

from marft_algos.common.batch import RolloutBatch, build_rollout_batch
from marft_algos.distributed import DistributedContext
from marft_algos.protocols import PolicyLike
from marft_algos.rollout.collector import Episode
from marft_algos.trainers.config import TrainerConfig
from marft_algos.trainers.guards import Guards
from marft_algos.trainers.optimizers import adapter_optimizers, clip_and_step, learning_rates
from marft_algos.trainers.policy_gradient import Objective, PolicyGradient
from marft_algos.trainers.schedule import AgentSchedule

__all__ = ["PolicySteps"]


class PolicySteps:
    """The policy-step half of a trainer; :class:`~marft_algos.trainers.base.Trainer` sets the
    attributes below."""

    policy: PolicyLike
    config: TrainerConfig
    agents: list[str]
    optimizers: dict[str, torch.optim.Optimizer]
    _optimizer_of: dict[str, str]
    critic_optimizer: torch.optim.Optimizer | None = None
    guards: Guards
    dist: DistributedContext
    iteration: int
    schedule: AgentSchedule
    """Which agents take optimizer steps at each iteration (``agent_schedule``)."""

    # ------------------------------------------------------------------ optimisation helpers
    CRITIC_KEY: ClassVar[str] = "__critic__"
    """Name of the critic optimizer's file in checkpoints (agent roles cannot start with '_')."""

    def checkpointed_optimizers(self) -> dict[str, torch.optim.Optimizer]:
        """Every optimizer a checkpoint or snapshot holds: the adapters' and the critic's."""
        out: dict[str, Any] = dict(self.optimizers)
        if self.critic_optimizer is not None:
            out[self.CRITIC_KEY] = self.critic_optimizer
        return out

    def build_optimizers(self) -> None:
        """One Adam per trainable adapter at its agent's learning rate (``learning_rate``,
        ``agent_learning_rates``), and the :attr:`schedule` that says which of them step."""
        c = self.config
        self.optimizers, self._optimizer_of = adapter_optimizers(
            self.policy, self.agents, c.learning_rate, c.adam_eps, c.agent_learning_rates
        )
        self.schedule = AgentSchedule.of(c, self._optimizer_of)

    def set_learning_rates(self) -> None:
        """Give every adapter's optimizer its agents' learning rate from the config (a
        checkpoint's optimizer state holds the rate it was saved with: a run resumed with
        ``allow_config_change`` continues under the new rates)."""
        rates = self.config.agent_learning_rates or {}
        for agent, key in self._optimizer_of.items():
            for group in self.optimizers[key].param_groups:  # shared adapters: one rate, checked
                group["lr"] = rates.get(agent, self.config.learning_rate)

    def trainable_agents(self) -> list[str]:
        """Agents whose adapters this trainer updates."""
        return [a for a in self.agents if a in self._optimizer_of]

    def agents_to_train(self) -> list[str]:
        """The trainable agents this iteration's update steps (all of them without a schedule)."""
        return self.schedule.agents_at(self.iteration)

    def learning_rate_metrics(self) -> dict[str, float]:
        """``train/learning_rate/<agent>``: the learning rate each trainable agent's adapter steps
        with this iteration (0 while the schedule freezes it)."""
        training = set(self.agents_to_train())
        rates = learning_rates(self.optimizers, self._optimizer_of)
        return {
            f"train/learning_rate/{agent}": lr if agent in training else 0.0
            for agent, lr in rates.items()
        }

    def zero_grad(self) -> None:
        for optimizer in self.optimizers.values():
            optimizer.zero_grad(set_to_none=True)

    # ------------------------------------------------------------------ the policy step
    def rollout_batch(self, episodes: Sequence[Episode]) -> RolloutBatch:
        """Every decision of ``episodes`` padded once (:func:`build_rollout_batch`)."""
        caps, cap = self.config.max_new_tokens_per_agent, self.config.max_new_tokens
        return build_rollout_batch(episodes, token_caps=caps, default_cap=cap)

    def objective(self) -> Objective:
        """The policy loss this trainer minimises."""
        raise NotImplementedError

    def single_policy_step(self) -> bool:
        """Whether an update takes one optimizer step per agent (one pass over one minibatch):
        its forward pass then runs on the weights the update starts from."""
        return False

    @property
    def trust_region_kl(self) -> float | None:
        """Undo a policy step whose KL on its batch exceeds this (None: never)."""
        return None

    def policy_gradient(self) -> PolicyGradient:
        """The shared policy-gradient step with this trainer's objective and sampling settings."""
        return PolicyGradient(
            self.policy,
            replace(
                self.objective(),
                behaviour_weight_cap=self.config.behaviour_weight_cap,
                behaviour_weight_mode=self.config.behaviour_weight_mode,
            ),
            sampling=self.config.sampling,
            accumulation_steps=self.config.gradient_accumulation_steps,
            max_chunk_tokens=self.config.max_chunk_tokens,
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
        """Backward, guards and optimizer step for one batch of the given agents' decisions
        (:meth:`~marft_algos.trainers.guards.Guards.step`: non-finite steps are skipped or undone;
        with :attr:`trust_region_kl`, a step past it on ``batch`` is undone)."""
        result = step.backward(batch, active=active, agents=agents)
        # Rows whose proximal log-probs were this forward's keep them: the KL after the step is
        # against π_prox, as with a separate proximal pass, not against the stepped policy.
        proximal = result.pop("proximal_log_probs", None)
        if proximal is not None:
            batch = batch.with_proximal(proximal)
        return self.guards.step(
            result,
            agents,
            lambda: self.step_policy(agents),
            self.zero_grad,
            iteration=self.iteration,
            trust_region_kl=self.trust_region_kl,
            kl_after=lambda: step.approx_kl(  # global
                batch if active is None else batch[active.nonzero().flatten().tolist()]
            ),
        )

    def step_policy(self, agents: Sequence[str]) -> tuple[float, bool]:
        """Clip and apply the gradients of the given agents' adapters: ``(total grad norm,
        applied)``; nothing is applied when a norm is not finite."""
        keys = sorted({self._optimizer_of[a] for a in agents if a in self._optimizer_of})
        applied = clip_and_step([self.optimizers[k] for k in keys], self.config.max_grad_norm)
        self.zero_grad()
        return applied
