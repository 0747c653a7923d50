"""Sampling actions: :class:`Generation` and the policy's ``generate``.

:class:`GenerationMixin` gives :class:`~marft_algos.policy.MultiAgentPolicy` its
:meth:`~GenerationMixin.generate` and :meth:`~GenerationMixin.generate_from_ids`: render, pick the
agent's model state (its adapter, merged or not), then :func:`~marft_algos.policy.decoding.decode`,
with the prompt work shared across calls through the policy's
:class:`~marft_algos.policy.prefix_cache.PrefixStore`. See the log-prob convention in
:mod:`marft_algos.policy.multi_agent`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import torch

from marft_algos.policy.backbone import seeded_rng
from marft_algos.policy.decoding import decode
from marft_algos.policy.prefix_cache import (
    MIN_SHARED_TOKENS,
    PREFIX_STORE_TOKENS,
    PrefillCounter,
    PrefixStore,
    weights_fingerprint,
)
from marft_algos.policy.rendering import render_prompt_ids
from marft_algos.protocols import GenerationSettings, Messages

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from marft_algos.policy.backbone import Backbone

__all__ = ["Generation", "GenerationMixin"]


class Generation(NamedTuple):
    """One sampled action of one agent.

    Attributes:
        prompt_ids: Token ids of the rendered prompt (no padding).
        action_ids: Exactly the sampled token ids, EOS included when produced, no padding.
        log_probs: Per-token log-probs of ``action_ids`` (policy log-prob convention).
        text: ``action_ids`` decoded without special tokens (what the env receives).
        finished: True if the agent produced an end-of-turn token, False if it hit the length cap.
        agent: The agent that acted.
        temperature: Temperature of the distribution ``log_probs`` are taken under.
        top_k: Top-k cut of that distribution (0: none).
        top_p: Top-p cut of that distribution (1: none).
    """

    prompt_ids: list[int]
    action_ids: list[int]
    log_probs: list[float]
    text: str
    finished: bool
    agent: str = ""
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0


class GenerationMixin:
    """``generate`` for :class:`~marft_algos.policy.MultiAgentPolicy` (which supplies the
    agents' models, adapters and tokenizers)."""

    merge_adapters_for_generation: bool = True
    """Generate with the agent's LoRA adapter folded into copies of the adapted base weights
    (:meth:`~marft_algos.policy.backbone.Backbone.merged`): one matmul per layer instead of three
    and no adapter code per decode step. The base weights themselves are never modified, so the
    update's forward is exactly the unmerged one; the rollout log-probs differ from it by float
    round-off only (tested). Costs one copy of the adapted weights while generating; set False to
    generate through the unmerged adapter. Applies to float32 base weights only: 16-bit weights
    always generate through the unmerged adapter, since rounding ``W + ΔW`` to 16 bits erases
    small adapter updates."""

    shared_prefix_tokens: int | None = MIN_SHARED_TOKENS
    """Fewest leading tokens that prompts of one :meth:`generate` or :meth:`token_log_probs`
    call must share for that beginning to run once, its keys and values continued by each
    (:func:`~marft_algos.policy.prefix_cache.shared_prefix_groups`; models with full attention
    only). None: only identical prompts share (each other prompt runs from its first token).
    Same tokens, log-probs and gradients up to float round-off."""

    prefix_store_tokens: int = PREFIX_STORE_TOKENS
    """Prompt tokens of keys and values :meth:`generate` keeps from earlier calls, per policy, so
    a later prompt that begins alike (an agent's system prompt and examples, a program's second
    call repeating its first) continues from them instead of prefilling them again
    (:class:`~marft_algos.policy.prefix_cache.PrefixStore`; models with full attention only). An
    entry serves only the weights that computed it: any change to the parameters empties the
    agent's entries. Sampled generation only: a greedy reply (evaluation, ``marft serve``) is
    computed from its own call alone, so it repeats word for word whatever ran before. 0 turns
    the store off (prompts of one call that begin alike still share their beginning). Same tokens and log-probs up to float
    round-off."""

    if TYPE_CHECKING:
        temperature: float
        prefix_store: PrefixStore
        prefill: PrefillCounter

        def tokenizer(self, agent: str) -> Any: ...
        def backbone(self, agent: str) -> Backbone: ...
        def _binding(self, agent: str) -> Any: ...
        def acting(self, agent: str, *, reference: bool = False) -> AbstractContextManager[Any]: ...

    def generate(
        self,
        agent: str,
        messages_batch: Sequence[Messages],
        settings: GenerationSettings,
        *,
        generator: torch.Generator | None = None,
    ) -> list[Generation]:
        """Sample one action per observation for one agent, in a single batched ``generate`` call.

        Args:
            agent: The agent acting.
            messages_batch: One chat transcript (or env observation ``{"messages": ...}``) per
                sample; rendered with the agent's chat template.
            settings: How to sample: the agent's length cap (:meth:`GenerationSettings.tokens_for`),
                temperature (None: the policy's; reported log-probs are those of the sampled
                distribution, see the module docstring), top-p, top-k, greedy or not, and an
                optional seed.
            generator: Seeds the sampling: one seed is drawn from it and sampling runs under that
                seed in a forked RNG, so the same generator state gives the same samples and the
                global RNG is not advanced. ``settings.seed`` does the same with an explicit seed;
                without either, sampling uses the global torch RNG (``torch.manual_seed`` makes it
                reproducible).

        Returns:
            One :class:`Generation` per observation, in order.
        """
        tokenizer = self.tokenizer(agent)
        prompts = [render_prompt_ids(tokenizer, m) for m in messages_batch]
        return self.generate_from_ids(agent, prompts, settings, generator=generator)

    def generate_from_ids(
        self,
        agent: str,
        prompt_ids: Sequence[Sequence[int]],
        settings: GenerationSettings,
        *,
        generator: torch.Generator | None = None,
    ) -> list[Generation]:
        """:meth:`generate` from already-rendered prompt token ids (multi-turn token-in)."""
        max_new_tokens = settings.tokens_for(agent)
        do_sample, seed = settings.do_sample, settings.seed
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}.")
        if generator is not None and seed is not None:
            raise ValueError(
                f"Pass either a generator or settings.seed (got seed={seed}), not both."
            )
        backbone = self.backbone(agent)
        temp = self.temperature if settings.temperature is None else float(settings.temperature)
        prompts = [list(map(int, p)) for p in prompt_ids]
        if not prompts:
            return []
        if do_sample and temp <= 0:
            raise ValueError(f"temperature must be > 0 when sampling, got {temp}.")
        if generator is not None:
            seed = int(torch.randint(0, 2**62, (1,), generator=generator).item())
        # Greedy decoding samples nothing: its log-probs follow the policy temperature, uncut.
        dist_temp, dist_k, dist_p = (
            (temp, settings.top_k, settings.top_p) if do_sample else (self.temperature, 0, 1.0)
        )
        binding = self._binding(agent)
        adapter = binding.adapter
        merged = adapter is not None and self.merge_adapters_for_generation
        store_key = (binding.backbone, adapter, merged)
        # Greedy replies (evaluation, serving) are compared word for word across runs: they never
        # continue from another call's keys and values, whose round-off differs from their own.
        keep = self.prefix_store_tokens and do_sample
        fingerprint = weights_fingerprint(backbone.model) if keep else None
        store = None if fingerprint is None else self.prefix_store
        if store is not None:
            store.max_tokens = self.prefix_store_tokens
            store.validate(store_key, fingerprint)
        with contextlib.ExitStack() as stack:
            stack.enter_context(seeded_rng(seed, backbone.device))
            if merged:
                model = stack.enter_context(backbone.merged(adapter))  # type: ignore[arg-type]
            else:
                model = stack.enter_context(self.acting(agent))
            out = decode(
                model,
                prompts,
                max_new_tokens=max_new_tokens,
                pad_id=backbone.pad_id,
                eos_ids=backbone.eos_ids,
                do_sample=do_sample,
                temperature=dist_temp,
                top_k=dist_k,
                top_p=dist_p,
                store=store,
                store_key=store_key,
                min_shared=self.shared_prefix_tokens,
            )
        self.prefill.add(out.prefill_tokens, out.prefill_saved)
        actions = out.actions
        logp_rows = out.log_probs
        finished = out.finished
        return [
            Generation(
                prompt_ids=prompts[i],
                action_ids=actions[i],
                log_probs=logp_rows[i],
                text=backbone.tokenizer.decode(actions[i], skip_special_tokens=True),
                finished=finished[i],
                agent=agent,
                temperature=dist_temp,
                top_k=dist_k,
                top_p=dist_p,
            )
            for i in range(len(actions))
        ]
