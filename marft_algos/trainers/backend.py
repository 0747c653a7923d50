"""The trainer's side of a rollout backend (an inference engine that generates the training
rollouts instead of the policy): hand it the adapters after each update, and let it rest while
the policy computes. A part of :class:`~marft_algos.trainers.base.Trainer`."""

from __future__ import annotations

from marft_algos.protocols import PolicyLike, RolloutBackend
from marft_algos.trainers.async_rollout import AsyncRollouts

__all__ = ["BackendSync"]


class BackendSync:
    """Keeps a rollout backend serving the adapters that train;
    :class:`~marft_algos.trainers.base.Trainer` sets the attributes below."""

    policy: PolicyLike
    rollout_backend: RolloutBackend | None
    async_rollouts: AsyncRollouts | None
    """The asynchronous run's batches (None: collected in this process)."""

    def sync_rollout_backend(self, version: int) -> None:
        """Hand the policy's current adapters to the rollout backend, if there is one (an
        asynchronous run syncs when it submits the next job, while the engine is idle)."""
        if self.rollout_backend is not None and self.async_rollouts is None:
            self.rollout_backend.sync_adapters(self.policy, version)

    def rest_rollout_backend(self) -> None:
        """Let the rollout backend free its device memory while the policy computes (an engine
        with a ``sleep()`` method, e.g. vLLM in sleep mode); it wakes on its next call. Not in
        an asynchronous run: the engine generates the next batch meanwhile."""
        sleep = getattr(self.rollout_backend, "sleep", None)
        if sleep is not None and self.async_rollouts is None:
            sleep()
