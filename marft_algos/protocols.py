"""What the trainers need of a policy, a critic and a tokenizer, as structural types.

The trainers are written against these protocols rather than the concrete classes, so a user can
bring their own policy (say, one backed by another inference engine) or critic: anything with
these methods works, and ``mypy`` checks that :class:`~marft_algos.policy.MultiAgentPolicy` and
:class:`~marft_algos.policy.critic.Critic` satisfy them. :class:`GenerationSettings`, the one
sampling object every ``generate`` takes, lives here too, so a policy, a rollout backend and the
collector all name the same type.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeAlias, runtime_checkable

import torch

__all__ = [
    "BackboneLike",
    "CriticLike",
    "GeneratingPolicy",
    "GenerationLike",
    "GenerationSettings",
    "Messages",
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


#: One observation to act on: a chat transcript, or an env observation ``{"messages": [...]}``.
Messages: TypeAlias = Sequence[Mapping[str, Any]] | Mapping[str, Any]


@dataclass(frozen=True)
class GenerationSettings:
    """How actions are sampled: the one settings object every ``generate`` takes.

    Attributes:
        max_new_tokens: Longest action in tokens.
        temperature: Softmax temperature (log-probs are of the temperature-scaled distribution);
            None: the policy's own temperature.
        top_p: Nucleus sampling threshold (1 disables).
        top_k: Top-k sampling (0 disables).
        do_sample: False for greedy decoding (evaluation).
        max_new_tokens_per_agent: Per-agent overrides of ``max_new_tokens`` (e.g. a reasoner that
            writes steps needs more than an actor that writes ``\\boxed{}``).
        seed: Seeds the sampling of a call made with these settings: the same seed gives the same
            samples. None: the call's ``generator`` seeds it, or without one the global torch RNG.
            A call with both a generator and a seed is refused.
    """

    max_new_tokens: int = 512
    temperature: float | None = None
    top_p: float = 1.0
    top_k: int = 0
    do_sample: bool = True
    max_new_tokens_per_agent: Mapping[str, int] | None = None
    seed: int | None = None

    def tokens_for(self, agent: str) -> int:
        """The length cap of ``agent``'s actions."""
        return int((self.max_new_tokens_per_agent or {}).get(agent, self.max_new_tokens))


class GenerationLike(Protocol):
    """One sampled action as ``generate`` returns it (e.g.
    :class:`~marft_algos.policy.multi_agent.Generation`): what the rollout collector keeps."""

    @property
    def prompt_ids(self) -> Sequence[int]:
        """Token ids of the rendered prompt, exactly what the model read."""
        ...

    @property
    def action_ids(self) -> Sequence[int]:
        """The sampled token ids, exactly as sampled."""
        ...

    @property
    def log_probs(self) -> Sequence[float]:
        """Per-token log-probs of ``action_ids`` under the sampling distribution."""
        ...

    @property
    def text(self) -> str:
        """``action_ids`` decoded: the action the env receives."""
        ...

    @property
    def finished(self) -> bool:
        """The agent ended its turn itself (False: cut at the length cap)."""
        ...


class GeneratingPolicy(Protocol):
    """What the rollout collector needs: batched generation for one agent."""

    def generate(
        self,
        agent: str,
        messages_batch: Sequence[Messages],
        settings: GenerationSettings,
        *,
        generator: torch.Generator | None = ...,
    ) -> Sequence[GenerationLike]:
        """One action per observation for ``agent``, sampled under ``settings``; ``generator``
        (if given) seeds the call with one draw, so the same generator state gives the same
        samples."""
        ...


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
