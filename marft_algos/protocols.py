"""What the trainers need of a policy, a critic and a tokenizer, as structural types.

The trainers are written against these protocols rather than the concrete classes, so a user can
bring their own policy (say, one backed by another inference engine) or critic: anything with
these methods works, and ``mypy`` checks that :class:`~marft_algos.policy.MultiAgentPolicy` and
:class:`~marft_algos.policy.critic.Critic` satisfy them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import torch

__all__ = [
    "BackboneLike",
    "CriticLike",
    "GeneratingPolicy",
    "PolicyLike",
    "RolloutBackend",
    "TokenLogProbsLike",
    "TokenizerLike",
]


@runtime_checkable
class TokenizerLike(Protocol):
    """The parts of a Hugging Face tokenizer the library uses."""

    def get_vocab(self) -> dict[str, int]: ...

    def decode(self, token_ids: Any, skip_special_tokens: bool = ...) -> str: ...

    def apply_chat_template(self, conversation: Any, *args: Any, **kwargs: Any) -> Any: ...


class BackboneLike(Protocol):
    """A base model with its tokenizer (``marft_algos.policy.backbone.Backbone``)."""

    name: str
    tokenizer: Any


class TokenLogProbsLike(Protocol):
    """``(log_probs, entropy, mask)`` of :meth:`PolicyLike.token_log_probs`, each ``(batch, T)``."""

    @property
    def log_probs(self) -> torch.Tensor: ...

    @property
    def entropy(self) -> torch.Tensor | None: ...

    @property
    def mask(self) -> torch.Tensor: ...


class GeneratingPolicy(Protocol):
    """What the rollout collector needs: batched generation for one agent."""

    def generate(
        self,
        agent: str,
        messages_batch: Sequence[Sequence[Mapping[str, Any]] | Mapping[str, Any]],
        *,
        max_new_tokens: int,
        temperature: float | None = ...,
        top_p: float = ...,
        top_k: int = ...,
        do_sample: bool = ...,
        generator: torch.Generator | None = ...,
        seed: int | None = ...,
    ) -> list[Any]: ...


@runtime_checkable
class RolloutBackend(GeneratingPolicy, Protocol):
    """A separate generation engine for rollouts (e.g. vLLM serving every agent's adapter).

    It generates exactly as :meth:`MultiAgentPolicy.generate` does — same arguments, the same
    :class:`~marft_algos.policy.multi_agent.Generation` records with the sampled ids and their
    log-probs under the sampled distribution — and after every update the trainer hands it the
    policy to copy the new adapters from (see ``docs/scaling.md``). Without one, the policy
    generates itself.
    """

    def sync_adapters(self, policy: Any, version: int) -> None:
        """Load the policy's current adapters; ``version`` is the number of updates so far."""
        ...


class PolicyLike(GeneratingPolicy, Protocol):
    """A multi-agent policy: generation, differentiable log-probs and per-agent parameters."""

    @property
    def agents(self) -> list[str]: ...

    def backbone(self, agent: str) -> Any: ...

    def tokenizer(self, agent: str) -> Any: ...

    def trainable_parameters(self, agent: str) -> list[torch.nn.Parameter]: ...

    def token_log_probs(
        self,
        agent: str,
        prompt_ids: Sequence[Sequence[int]],
        action_ids: Sequence[Sequence[int]],
        *,
        reference: bool = ...,
        with_entropy: bool = ...,
        temperature: float | None = ...,
        top_k: int = ...,
        top_p: float = ...,
        differentiable_entropy: bool = ...,
    ) -> TokenLogProbsLike: ...

    def token_log_probs_with_uncut(
        self,
        agent: str,
        prompt_ids: Sequence[Sequence[int]],
        action_ids: Sequence[Sequence[int]],
        *,
        reference: bool = ...,
        with_entropy: bool = ...,
        temperature: float | None = ...,
        top_k: int = ...,
        top_p: float = ...,
        differentiable_entropy: bool = ...,
        with_uncut: bool = ...,
    ) -> tuple[TokenLogProbsLike, torch.Tensor | None]: ...


class CriticLike(Protocol):
    """A value function over rendered prompts (``marft_algos.policy.critic.Critic``).

    ``backbone`` is the model whose tokenizer the critic reads; agents on another base model have
    their observations re-rendered for it.
    """

    backbone: Any

    def parameters(self) -> Iterable[torch.nn.Parameter]: ...

    def action_values(self, prompt_ids: Sequence[Sequence[int]]) -> torch.Tensor: ...

    def token_values(
        self, prompt_ids: Sequence[Sequence[int]], action_ids: Sequence[Sequence[int]]
    ) -> torch.Tensor: ...
