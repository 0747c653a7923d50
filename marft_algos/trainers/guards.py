"""The training loop's safety checks, kept apart from the loop so each can be tested alone.

:class:`Guards` owns:

- **snapshot / restore** of the trainable parameters (every adapter and the critic, or some agents'
  adapters) and their optimizer states: a policy step that leaves weights non-finite or leaves the
  trust region is undone with them, and so is an entropy blow-up under ``rollback_on_blowup``;
- the **entropy baseline**: the average ``train/entropy`` of the first iterations, against which a
  blow-up (the paper's §5.2 collapse) is measured;
- the **non-finite streak**: iterations in a row whose policy steps were all skipped as
  non-finite; ``max_nonfinite_iterations`` of them stop the run with
  :class:`~marft_algos.runs.folder.TrainingDiverged`.

The baseline and the streak are part of a checkpoint (:meth:`Guards.state`), so a resumed run
flags what the uninterrupted one would.
"""

from __future__ import annotations

import copy
import logging
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from marft_algos.runs.folder import TrainingDiverged

__all__ = ["BASELINE_ITERATIONS", "Guards"]

logger = logging.getLogger("marft_algos.trainers.base")

BASELINE_ITERATIONS = 3
"""Iterations whose ``train/entropy`` makes up the entropy baseline."""


class Guards:
    """Snapshots, entropy blow-up detection and the non-finite stop of one training run.

    Args:
        parameters: An agent's trainable parameters (``policy.trainable_parameters``).
        optimizer_of: Agent → key of the optimizer that steps its adapter (agents sharing an
            adapter share a key); agents absent from it are frozen.
        optimizers: Every optimizer a snapshot covers, by key (the critic's included); called
            each time, so an optimizer built after the guards is covered.
        critic_parameters: The critic's parameters (None: no critic).
        entropy_blowup_factor: Flag a blow-up when ``train/entropy`` exceeds this multiple of the
            baseline (None: never).
        rollback_on_blowup: On a blow-up, restore the last snapshot taken after a good iteration.
        max_nonfinite_iterations: Stop after this many all-skipped iterations in a row (0: never).
    """

    def __init__(
        self,
        parameters: Callable[[str], Sequence[torch.Tensor]],
        optimizer_of: Mapping[str, str],
        optimizers: Callable[[], Mapping[str, torch.optim.Optimizer]],
        critic_parameters: Callable[[], Iterable[torch.Tensor]] | None = None,
        *,
        entropy_blowup_factor: float | None = 3.0,
        rollback_on_blowup: bool = False,
        max_nonfinite_iterations: int = 3,
    ) -> None:
        self.parameters = parameters
        self.optimizer_of = optimizer_of
        self.optimizers = optimizers
        self.critic_parameters = critic_parameters
        self.entropy_blowup_factor = entropy_blowup_factor
        self.rollback_on_blowup = rollback_on_blowup
        self.max_nonfinite_iterations = max_nonfinite_iterations
        self.entropy_baseline: list[float] = []
        self.nonfinite_streak = 0
        self.last_good: dict[str, Any] | None = None
        self.steps = {"tried": 0, "skipped": 0}
        """Policy steps of the current update, and how many of them were skipped as non-finite."""

    # ------------------------------------------------------------------ snapshot / restore
    @classmethod
    def of(
        cls,
        policy: Any,
        critic: Any,
        optimizer_of: Mapping[str, str],
        optimizers: Callable[[], Mapping[str, torch.optim.Optimizer]],
        config: Any,
    ) -> Guards:
        """The guards of a trainer: its policy's adapters and critic, with the config's settings."""
        return cls(
            policy.trainable_parameters,
            optimizer_of,
            optimizers,
            critic.parameters if critic is not None else None,
            entropy_blowup_factor=config.entropy_blowup_factor,
            rollback_on_blowup=config.rollback_on_blowup,
            max_nonfinite_iterations=config.max_nonfinite_iterations,
        )

    def tensors(self) -> list[torch.Tensor]:
        """Every trainable tensor the guards protect: the trained adapters', then the critic's."""
        out = [p for agent in self.optimizer_of for p in self.parameters(agent)]
        return out + list(self.critic_parameters() if self.critic_parameters is not None else [])

    def snapshot(self, agents: Sequence[str] | None = None) -> dict[str, Any]:
        """Copies of parameters and optimizer states: of everything, or of ``agents``' adapters."""
        chosen = [
            a for a in (self.optimizer_of if agents is None else agents) if a in self.optimizer_of
        ]
        params: dict[str, Any] = {
            "policy": {a: [p.detach().clone() for p in self.parameters(a)] for a in chosen}
        }
        optimizers = dict(self.optimizers())
        if agents is None:
            if self.critic_parameters is not None:
                params["critic"] = [p.detach().clone() for p in self.critic_parameters()]
        else:
            keys = {self.optimizer_of[a] for a in chosen}
            optimizers = {k: optimizers[k] for k in keys}
        return {
            "params": params,
            "optimizers": {k: copy.deepcopy(o.state_dict()) for k, o in optimizers.items()},
        }

    def restore(self, snapshot: Mapping[str, Any]) -> None:
        """Put back what :meth:`snapshot` copied (parameters in place, optimizer states)."""
        with torch.no_grad():
            for agent, tensors in snapshot["params"]["policy"].items():
                for p, saved in zip(self.parameters(agent), tensors, strict=True):
                    p.copy_(saved)
            if self.critic_parameters is not None and "critic" in snapshot["params"]:
                for p, saved in zip(
                    self.critic_parameters(), snapshot["params"]["critic"], strict=True
                ):
                    p.copy_(saved)
        optimizers = self.optimizers()
        for key, state in snapshot["optimizers"].items():
            optimizers[key].load_state_dict(state)

    def weights_finite(self, agents: Sequence[str]) -> bool:
        """Whether every trainable weight of ``agents``' adapters is finite."""
        return all(bool(torch.isfinite(p).all()) for a in agents for p in self.parameters(a))

    # ------------------------------------------------------------------ the policy step
    def step(
        self,
        result: Mapping[str, Any],
        agents: Sequence[str],
        apply: Callable[[], tuple[float, bool]],
        discard: Callable[[], None],
        *,
        iteration: int,
        trust_region_kl: float | None = None,
        kl_after: Callable[[], float] | None = None,
    ) -> dict[str, Any]:
        """Apply one policy step of ``agents`` whose backward pass returned ``result``, guarded.

        A non-finite ``result["loss"]`` skips the step (``discard`` drops the gradients); a step
        ``apply`` refuses (a non-finite gradient) or one that leaves a weight non-finite is undone;
        both count as ``skipped_nonfinite``. With ``trust_region_kl``, ``kl_after()`` measures
        the KL to the rollout policy after the step, and a step that exceeds it is undone
        (``skipped_trust_region``).

        Args:
            result: The backward pass's metrics (``loss``, ``policy_loss``, ``kl``, ...).
            agents: The agents whose adapters the step changes.
            apply: Clips and applies the gradients: ``(grad norm, applied)``.
            discard: Drops the gradients of a skipped step.
            iteration: For the log messages.
            trust_region_kl: Largest KL a step may reach (None: no trust region).
            kl_after: The KL of the stepped policy on the step's batch.

        Returns:
            ``result`` with ``grad_norm``, ``skipped_nonfinite`` and, with a trust region,
            ``approx_kl_after`` and ``skipped_trust_region`` when it was undone.
        """
        if not math.isfinite(result["loss"]):
            self.count_step(skipped=True)
            logger.warning(
                "Skipping a policy update at iteration %d: the loss is %s (policy loss %s, KL to "
                "the reference %s).",
                iteration,
                result["loss"],
                result.get("policy_loss"),
                result.get("kl"),
            )
            discard()
            return {**result, "skipped_nonfinite": 1}
        before = self.snapshot(agents)
        grad_norm, applied = apply()
        if applied and not self.weights_finite(agents):
            # Finite gradients can still step to NaN/inf weights (a huge learning rate, a
            # degenerate optimizer state); the next rollout would sample from them, so undo.
            logger.warning(
                "Undoing a policy update at iteration %d: it made adapter weights non-finite.",
                iteration,
            )
            self.restore(before)
            applied = False
        self.count_step(skipped=not applied)
        out = {**result, "grad_norm": grad_norm, "skipped_nonfinite": int(not applied)}
        if applied and trust_region_kl is not None and kl_after is not None:
            kl = kl_after()
            out["approx_kl_after"] = kl
            if not kl <= trust_region_kl:
                self.restore(before)
                out["skipped_trust_region"] = 1
        return out

    # ------------------------------------------------------------------ non-finite updates
    def start_update(self) -> None:
        """Reset the step counts before an iteration's update."""
        self.steps = {"tried": 0, "skipped": 0}

    def count_step(self, *, skipped: bool) -> None:
        """Record one policy step of the current update."""
        self.steps["tried"] += 1
        self.steps["skipped"] += int(skipped)

    def check_nonfinite(self, iteration: int) -> None:
        """After an update: extend or end the streak of all-skipped iterations.

        Raises:
            TrainingDiverged: The streak reached ``max_nonfinite_iterations``.
        """
        tried, skipped = self.steps["tried"], self.steps["skipped"]
        self.nonfinite_streak = self.nonfinite_streak + 1 if tried and skipped == tried else 0
        limit = self.max_nonfinite_iterations
        if limit and self.nonfinite_streak >= limit:
            raise TrainingDiverged(
                f"Every policy update of the last {self.nonfinite_streak} iterations (up to iteration "
                f"{iteration + 1}) was skipped because its loss or gradients were not finite, so "
                f"the run cannot learn. Lower learning_rate, set max_grad_norm, check the rewards for "
                f"NaN/inf, or raise max_nonfinite_iterations (0 disables this stop)."
            )

    # ------------------------------------------------------------------ entropy blow-ups
    def check_entropy(self, metrics: dict[str, Any], iteration: int) -> None:
        """Flag ``train/entropy_blowup`` in ``metrics`` and, with rollback, restore the last good
        state (``train/rolled_back``). The first iterations build the baseline instead."""
        entropy = metrics.get("train/entropy")
        factor = self.entropy_blowup_factor
        if entropy is None or factor is None or not math.isfinite(entropy):
            return
        if len(self.entropy_baseline) < BASELINE_ITERATIONS:
            self.entropy_baseline.append(entropy)
            self.last_good = self.snapshot() if self.rollback_on_blowup else None
            metrics["train/entropy_blowup"] = 0
            return
        baseline = float(np.mean(self.entropy_baseline))
        blown = entropy > factor * max(baseline, 1e-3)
        metrics["train/entropy_blowup"] = int(blown)
        if not blown:
            if self.rollback_on_blowup:
                self.last_good = self.snapshot()
            return
        logger.warning(
            "Entropy blow-up at iteration %d: train/entropy %.3f > %.1f x early average %.3f.",
            iteration,
            entropy,
            factor,
            baseline,
        )
        if self.rollback_on_blowup and self.last_good is not None:
            self.restore(self.last_good)
            metrics["train/rolled_back"] = 1
            logger.warning(
                "Rolled back adapters, critic and optimizers to the last good iteration."
            )

    # ------------------------------------------------------------------ checkpoints
    def state(self) -> dict[str, Any]:
        """The counters a checkpoint keeps (the keys of the checkpoint's trainer state)."""
        return {
            "entropy_baseline": list(self.entropy_baseline),
            "nonfinite_streak": self.nonfinite_streak,
        }

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Continue from :meth:`state`'s counters (absent keys: a fresh start)."""
        self.entropy_baseline = list(state.get("entropy_baseline", []))
        self.nonfinite_streak = int(state.get("nonfinite_streak", 0))
