"""Log-probs of given actions: :class:`TokenLogProbs` and the policy's ``token_log_probs``.

:class:`ScoringMixin` gives :class:`~marft_algos.policy.MultiAgentPolicy` its
:meth:`~ScoringMixin.token_log_probs`: the update's forward pass over packed prompts and actions,
with each distinct prompt (and each shared beginning) run once where the model allows it
(:func:`~marft_algos.policy.kv_cache.shared_prompt_action_logits`), under the distribution the
rollout sampled from. See the log-prob convention in :mod:`marft_algos.policy.multi_agent`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import torch

from marft_algos.policy.checkpointing import checkpointed_layers
from marft_algos.policy.forward import (
    action_logits,
    full_attention_only,
    log_probs_and_entropy,
    pack,
)
from marft_algos.policy.kv_cache import shared_prompt_action_logits
from marft_algos.policy.prefix_cache import PrefillCounter

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from marft_algos.policy.backbone import Backbone

__all__ = ["ScoringMixin", "TokenLogProbs"]


class TokenLogProbs(NamedTuple):
    """Result of :meth:`MultiAgentPolicy.token_log_probs` (unpacks as a 3-tuple)."""

    log_probs: torch.Tensor  # (batch, T_act), 0 where mask is False
    entropy: torch.Tensor | None  # (batch, T_act) or None
    mask: torch.Tensor  # (batch, T_act) bool


class ScoringMixin:
    """``token_log_probs`` for :class:`~marft_algos.policy.MultiAgentPolicy` (which supplies the
    agents' models and adapters)."""

    share_prompts_in_update: bool = True
    """:meth:`token_log_probs` runs each distinct prompt of a batch once, without padding, and
    shares its keys and values among the rows that continue it (a GRPO group), instead of running
    every row's padded prompt (:func:`~marft_algos.policy.kv_cache.shared_prompt_action_logits`;
    models with full attention only). Same log-probs and gradients up to float round-off."""

    gradient_checkpointing: bool = False
    """Recompute each decoder layer's activations in the backward pass of :meth:`token_log_probs`
    instead of keeping them (:func:`~marft_algos.policy.checkpointing.checkpointed_layers`): activation
    memory of about one layer instead of all, for one more forward pass per update. The update then
    runs every row's padded prompt (a checkpointed layer keeps no KV cache to share a prompt
    through). Same log-probs and gradients up to float round-off (tested)."""

    if TYPE_CHECKING:
        temperature: float
        shared_prefix_tokens: int | None
        update_prefill: PrefillCounter

        def backbone(self, agent: str) -> Backbone: ...
        def acting(self, agent: str, *, reference: bool = False) -> AbstractContextManager[Any]: ...

    def token_log_probs(
        self,
        agent: str,
        prompt_ids: Sequence[Sequence[int]],
        action_ids: Sequence[Sequence[int]],
        *,
        reference: bool = False,
        with_entropy: bool = False,
        temperature: float | None = None,
        top_k: int = 0,
        top_p: float = 1.0,
        differentiable_entropy: bool = True,
    ) -> TokenLogProbs:
        """Per-token log-probs of actions given prompts, differentiable w.r.t. the agent's adapter.

        Args:
            agent: The agent.
            prompt_ids: Prompt token ids per sample.
            action_ids: Action token ids per sample (as returned in :class:`Generation`).
            reference: Use the base model with all adapters disabled (the KL reference policy).
            with_entropy: Also return per-token entropies of the distribution.
            temperature: Temperature of the distribution (default: the policy's); pass the
                rollout's sampling temperature so the ratio compares like with like.
            top_k: Top-k cut of the distribution, as in sampling (0: none).
            top_p: Top-p cut of the distribution, as in sampling (1: none). With a cut, an action
                token outside the current top-k / top-p set has log-prob ``-inf``.
            differentiable_entropy: False: the entropy is computed without autograd, for logging
                only (cheaper when the loss has no entropy bonus).

        Returns:
            ``(log_probs, entropy, mask)``, each ``(batch, T_act)`` with ``T_act`` the longest
            action; padded entries are 0 and ``mask`` is False there.
        """
        out, _ = self.token_log_probs_with_uncut(
            agent,
            prompt_ids,
            action_ids,
            reference=reference,
            with_entropy=with_entropy,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            differentiable_entropy=differentiable_entropy,
            with_uncut=False,
        )
        return out

    def token_log_probs_with_uncut(
        self,
        agent: str,
        prompt_ids: Sequence[Sequence[int]],
        action_ids: Sequence[Sequence[int]],
        *,
        reference: bool = False,
        with_entropy: bool = False,
        temperature: float | None = None,
        top_k: int = 0,
        top_p: float = 1.0,
        differentiable_entropy: bool = True,
        with_uncut: bool = True,
    ) -> tuple[TokenLogProbs, torch.Tensor | None]:
        """:meth:`token_log_probs`, and from the same forward pass the log-probs under the
        temperature alone (no top-k/top-p cut): what the KL terms to the reference compare.

        Returns:
            ``(token_log_probs, uncut)``: ``uncut`` is ``(batch, T_act)``, differentiable, 0 on
            padding; the same tensor as the cut log-probs when there is no cut; None unless
            ``with_uncut``.
        """
        backbone = self.backbone(agent)
        temp = self.temperature if temperature is None else float(temperature)
        batch = pack(prompt_ids, action_ids, backbone.pad_id, backbone.device)
        width = batch.action_ids.shape[1]  # 0: no action has a token
        if width == 0 and not len(prompt_ids):
            empty = torch.zeros(batch.action_ids.shape, device=backbone.device)
            out = TokenLogProbs(empty, empty.clone() if with_entropy else None, batch.action_mask)
            return out, (empty.clone() if with_uncut else None)
        if width == 0:
            # The forward still runs, over one stand-in token per row, and its outputs are cut
            # to width 0 below: a loss over them keeps its graph (a backward runs), and under
            # --fsdp this rank runs the same passes as ranks whose chunk has tokens.
            batch = pack(
                prompt_ids, [[backbone.pad_id]] * len(prompt_ids), backbone.pad_id, backbone.device
            )
        checkpointing = self.gradient_checkpointing and torch.is_grad_enabled()
        with self.acting(agent, reference=reference) as model:
            # A checkpointed layer writes no KV cache, which the shared-prompt path needs.
            if (
                self.share_prompts_in_update
                and full_attention_only(model.config)
                and not checkpointing
            ):
                logits = shared_prompt_action_logits(
                    model, batch, min_shared=self.shared_prefix_tokens, counter=self.update_prefill
                )  # (batch, T, vocab)
            else:
                self.update_prefill.add(sum(len(p) for p in prompt_ids), 0)
                with checkpointed_layers(model, checkpointing):
                    logits = action_logits(model, batch)  # (batch, T, vocab)
        logp, entropy = log_probs_and_entropy(
            logits,
            batch.action_ids,
            batch.action_mask,
            temperature=temp,
            top_k=top_k,
            top_p=top_p,
            with_entropy=with_entropy,
            differentiable_entropy=differentiable_entropy,
        )
        uncut = None
        if with_uncut:
            uncut = (
                log_probs_and_entropy(
                    logits, batch.action_ids, batch.action_mask, temperature=temp
                )[0]
                if top_k or top_p < 1.0
                else logp
            )  # (batch, T)
        if width == 0:  # the stand-in token's columns go
            entropy = None if entropy is None else entropy[:, :0]
            uncut = None if uncut is None else uncut[:, :0]
            return TokenLogProbs(logp[:, :0], entropy, batch.action_mask[:, :0]), uncut
        return TokenLogProbs(logp, entropy, batch.action_mask), uncut
