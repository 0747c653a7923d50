"""Batched sampling with a KV cache that records each sampled token's log-prob as it decodes.

:func:`decode` is what :meth:`~marft_algos.policy.MultiAgentPolicy.generate` runs instead of
transformers' ``generate``. It does the same work for the same distribution — the logits of every
step processed by :func:`~marft_algos.policy.forward.sampling_logits` (temperature, then top-k,
then top-p, transformers' own warpers), one token drawn per row, rows frozen after an end-of-turn
token — and in addition:

- keeps the log-prob of the sampled token at every step (``log_softmax`` of the processed
  logits, the formula :func:`~marft_algos.policy.forward.log_probs_and_entropy` uses in the
  update), so rollouts need neither a second forward pass nor the full-vocabulary scores;
- draws with an inverse-CDF search (:func:`sample_categorical`) instead of
  ``torch.multinomial``, which is slow on CPU for a large vocabulary, from a 53-bit uniform and a
  float64 cumulative sum, so even a token of probability 1e-9 is drawn at its rate;
- prefills each distinct prompt once, in batches of similar lengths
  (:func:`~marft_algos.policy.kv_cache.prompt_caches`): rows with equal prompts (a GRPO group)
  share the prompt's KV cache entries, copied row-wise after the prefill; prompts that begin
  alike (an agent's system prompt and examples) run their common beginning once, and with a
  :class:`~marft_algos.policy.prefix_cache.PrefixStore` a beginning computed by an earlier call
  under the same weights is not computed again;
- grows the KV cache in place (:class:`~marft_algos.policy.kv_cache.GrowingLayer`) instead of
  concatenating the whole cache at every step;
- synchronises with the device only at steps 4, 8, 16, ... (:data:`FIRST_CHECK`): there it stops
  when every row has ended and drops finished rows from the batch and the KV cache, so the
  number of host synchronisations grows with the logarithm of ``max_new_tokens``, and a row
  that ended keeps decoding (masked) at most until the next check;
- gives each decode step a ready attention mask (:func:`decode_step_masks`): handed the 2D
  padding mask, transformers reads it on the host at every step (``_ignore_causal_mask_sdpa``
  asks whether it may skip the mask), one synchronisation per token, which on a GPU stalls every
  step until the device catches up (issue 49). The steps' 4D masks are built once, in
  transformers' own form for the model's attention (``sdpa`` or ``eager``), and each step takes
  a view; a batch without padding passes no mask, as transformers would. Other attention
  implementations and models with sliding-window layers keep the 2D mask. One forward call of
  the model per token.

The layout is the one of :mod:`marft_algos.policy.forward`: prompts left-padded to the widest,
positions counting real tokens only, so the update's forward sees every token at the position
and with the context it had here.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any, NamedTuple

import torch

from marft_algos.policy.forward import (
    full_attention_only,
    last_token_logits,
    left_pad,
    sampling_logits,
)
from marft_algos.policy.prefix_cache import MIN_SHARED_TOKENS, PrefixStore
from marft_algos.policy.stopping import stop_requested

__all__ = [
    "READY_MASK_ATTENTION",
    "UNIFORM_BITS",
    "Decoded",
    "decode",
    "decode_step_masks",
    "sample_categorical",
    "takes_ready_masks",
    "uniform_draws",
]


class Decoded(NamedTuple):
    """The output of :func:`decode`.

    Attributes:
        actions: Per row, the sampled ids up to and including the first end-of-turn token.
        log_probs: Per row, the log-prob of each of those tokens under the processed distribution.
        finished: Per row, whether it ended with an end-of-turn token.
        prefill_tokens: Prompt tokens run through the model.
        prefill_saved: Prompt tokens of the rows not run: repeated prompts and shared beginnings.
    """

    actions: list[list[int]]
    log_probs: list[list[float]]
    finished: list[bool]
    prefill_tokens: int = 0
    prefill_saved: int = 0


#: The first decode step after which :func:`decode` checks on the host whether rows have ended;
#: later checks follow at twice the previous step (4, 8, 16, ...).
FIRST_CHECK = 4

#: Bits of the uniform behind each draw: it is ``k / 2**53`` for an integer ``k`` drawn uniformly
#: from ``[0, 2**53)``, every value a float64 holds exactly on ``[0, 1)`` at that spacing.
UNIFORM_BITS = 53


def uniform_draws(n: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """``(n,)`` float64 uniforms on ``[0, 1)`` with :data:`UNIFORM_BITS` bits of resolution.

    Drawn as 53-bit integers from the global torch RNG and scaled exactly, so the resolution is
    the same on every device (a float32 ``torch.rand`` has 24 bits: spacing 6e-8).
    """
    k = torch.randint(0, 2**UNIFORM_BITS, (n,), dtype=torch.int64, device=device)
    return k.double() * 2.0**-UNIFORM_BITS


def sample_categorical(probs: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """Draw one index per row of ``probs`` by inverting its cumulative distribution.

    Index ``i`` is returned when ``(1 − u)·total`` falls in ``(cdf[i−1], cdf[i]]``, an interval of
    length ``probs[i]``, so a zero-probability entry is never drawn. The cumulative sum and the
    target are taken in float64. With ``u`` from :func:`uniform_draws` (a multiple of 2^-53), row
    ``i`` of ``n`` weights ``p`` is drawn with a probability that differs from ``p[i] / Σp`` by at
    most ``2^-50 + 3·n·2^-53``: the first term from the grid of ``u`` and the rounding of the
    target, the second the worst case of rounding the float64 sum (1.7e-11 for a 50,000-token
    vocabulary; actual sums err far less). A token of probability 1e-9 is drawn at its rate
    (tested), where a float32 uniform and cumulative sum (spacing 2^-24 ≈ 6e-8 near 1) can miss a
    token below about 6e-8 altogether.

    Args:
        probs: ``(batch, n)`` non-negative weights (need not sum to 1).
        uniforms: ``(batch,)`` draws from ``U[0, 1)`` (float64 for the bound above).

    Returns:
        ``(batch,)`` int64 indices.
    """
    cdf = probs.double().cumsum(-1)  # (batch, n)
    # A parallel device scan need not repeat its value over a run of zeros (top-k/top-p cuts):
    # a cut token whose entry came out above its predecessor's could be drawn, with log-prob −inf.
    # Each zero-probability entry takes the largest entry before it instead, so the search never
    # stops on one, and the sequence is non-decreasing as the search needs. On a CPU, where the
    # scan is sequential, this changes no value.
    cdf = torch.where(probs > 0, cdf, 0.0).cummax(-1).values
    # 1 − u lies in (0, 1]: the target is > 0, so a leading zero-probability entry is never hit.
    target = (1.0 - uniforms.double()) * cdf[:, -1]  # (batch,)
    index = torch.searchsorted(cdf, target.unsqueeze(-1)).squeeze(-1)
    return index.clamp_max(probs.shape[-1] - 1)


#: Attention implementations whose decode steps take the ready masks of :func:`decode_step_masks`
#: (transformers' mask for them is a 4D tensor, which its models pass through unchanged).
READY_MASK_ATTENTION = ("sdpa", "eager")


def takes_ready_masks(config: Any) -> bool:
    """Whether a model's decode steps can take :func:`decode_step_masks`: its attention is in
    :data:`READY_MASK_ATTENTION`, it is causal, and no layer attends to a window only (one mask
    would not fit every layer)."""
    return (
        getattr(config, "_attn_implementation", None) in READY_MASK_ATTENTION
        and getattr(config, "is_causal", True)
        and full_attention_only(config)
    )


def decode_step_masks(model: Any, prompt_mask: torch.Tensor, max_new_tokens: int) -> torch.Tensor:
    """The 4D attention masks of every decode step, as one tensor of which each step takes a view.

    A decode step's query (one token) attends to every real prompt token and every token decoded
    so far, so the mask of step ``t`` (``P + t + 1`` keys and values) is the first ``P + t + 1``
    columns of one mask over the prompt and ``max_new_tokens`` decoded tokens. It is built by
    transformers' own mask function for the model's attention implementation, with the causal
    skip off, so it holds what transformers would build from the 2D mask (boolean for ``sdpa``,
    0 / dtype-minimum for ``eager``), without reading the mask on the host.

    Args:
        model: The causal LM (peft-wrapped or not).
        prompt_mask: ``(batch, P)`` 2D mask of the left-padded prompts (1: real token).
        max_new_tokens: Tokens to be decoded.

    Returns:
        ``(batch, 1, 1, P + max_new_tokens)``; step ``t`` passes ``[..., : P + t + 1]``.

    Raises:
        ValueError: The model cannot take them (:func:`takes_ready_masks`).
    """
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, causal_mask_function

    config = model.config
    if not takes_ready_masks(config):
        raise ValueError(
            f"{type(model).__name__} (attention "
            f"{getattr(config, '_attn_implementation', None)!r}) cannot take "
            f"ready decode masks: it needs one of {READY_MASK_ATTENTION} and full attention in "
            f"every layer; decode with ready_mask=False."
        )
    implementation = config._attn_implementation
    batch = prompt_mask.shape[0]
    decoded = prompt_mask.new_ones((batch, max_new_tokens))
    padding = torch.cat([prompt_mask, decoded], dim=1).bool()  # (batch, P + max_new_tokens)
    columns = padding.shape[1]
    # The last query position sees every column; a step's view cuts the columns it cannot see.
    return ALL_MASK_ATTENTION_FUNCTIONS[implementation](
        batch_size=batch,
        q_length=1,
        kv_length=columns,
        q_offset=columns - 1,
        kv_offset=0,
        mask_function=causal_mask_function,
        attention_mask=padding,
        allow_is_causal_skip=False,
        dtype=model.get_input_embeddings().weight.dtype,
        config=config,
        use_vmap=False,
        device=prompt_mask.device,
    )


@torch.no_grad()
def decode(
    model: Any,
    prompts: Sequence[Sequence[int]],
    *,
    max_new_tokens: int,
    pad_id: int,
    eos_ids: Sequence[int],
    do_sample: bool = True,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    ready_mask: bool = True,
    store: PrefixStore | None = None,
    store_key: Hashable = None,
    min_shared: int | None = MIN_SHARED_TOKENS,
) -> Decoded:
    """Generate up to ``max_new_tokens`` tokens per prompt; log-probs recorded on the way.

    Sampling draws from ``softmax(sampling_logits(logits, temperature, top_k, top_p))`` with the
    global torch RNG (one 53-bit uniform per row per step, :func:`uniform_draws`); greedy
    decoding takes the argmax of the raw logits and reports log-probs under
    ``(temperature, top_k, top_p)`` as given.

    Args:
        model: A transformers causal LM (peft-wrapped or not), already in the wanted adapter state.
        prompts: Token ids of each prompt (non-empty).
        max_new_tokens: Length cap.
        pad_id: Id placed after a finished row's end (never returned).
        eos_ids: Ids that end a row (empty: every row runs to the cap).
        do_sample: Sample (True) or take the argmax (False).
        temperature: Temperature of the distribution (> 0).
        top_k: Top-k cut (0: none).
        top_p: Nucleus cut (1: none).
        ready_mask: Give the decode steps ready 4D masks (:func:`decode_step_masks`) where the
            model takes them. False: the 2D mask, which transformers reads on the host at every
            step (the reference the tests compare with; same tokens and log-probs).
        store: Keys and values of earlier prompts computed by this model's current weights (the
            caller checks them, :meth:`~marft_algos.policy.prefix_cache.PrefixStore.validate`);
            beginnings found there are not prefilled again, and this call's prompts are kept.
        store_key: The model state (adapter) ``store``'s entries are filed under.
        min_shared: Fewest leading tokens distinct prompts must share to run them once
            (:func:`~marft_algos.policy.prefix_cache.shared_prefix_groups`); None: never.

    Returns:
        The sampled actions, their log-probs and whether each row finished.
    """
    from marft_algos.policy.kv_cache import growing_cache, left_padded_cache, prompt_caches

    device = next(model.parameters()).device
    # Each distinct prompt is prefilled once; its rows copy the cache afterwards.
    keys = [tuple(int(t) for t in p) for p in prompts]
    distinct: dict[tuple[int, ...], int] = {}
    rows = torch.tensor([distinct.setdefault(k, len(distinct)) for k in keys], device=device)
    distinct_prompts = [list(k) for k in distinct]
    _, mask = left_pad(distinct_prompts, pad_id, device)  # (U, P)
    if full_attention_only(model.config):
        # Each distinct prompt alone: no compute spent on padding.
        prefilled = prompt_caches(
            model, distinct_prompts, min_shared=min_shared, store=store, store_key=store_key
        )
        logits, prefill_tokens = prefilled.last, prefilled.tokens  # logits (U, vocab)
        cache = left_padded_cache(prefilled.caches, rows, mask.shape[1], growing=True)
        del prefilled
    else:
        prefill_tokens = int(mask.sum())
        ids = left_pad(distinct_prompts, pad_id, device)[0]
        logits, cache = last_token_logits(
            model,
            input_ids=ids,
            attention_mask=mask,
            position_ids=(mask.cumsum(-1) - 1).clamp_min(0),
            past_key_values=growing_cache(model.config),
            use_cache=True,
        )  # logits (U, vocab)
        if len(distinct) < len(keys):
            cache.batch_select_indices(rows)
    logits, mask = logits[rows], mask[rows]  # (B, vocab), (B, P)
    position = mask.sum(-1, keepdim=True) - 1  # (B, 1): last prompt position
    prompt_width = mask.shape[1]
    ready = ready_mask and takes_ready_masks(model.config)
    # Without padding the steps need no mask at all (transformers' own choice for such a batch).
    padded = any(len(p) < prompt_width for p in distinct_prompts)
    step_masks = decode_step_masks(model, mask, max_new_tokens) if ready and padded else None

    batch = len(keys)
    eos = torch.tensor(list(eos_ids), dtype=torch.long, device=device)
    done = torch.zeros(batch, dtype=torch.bool, device=device)
    tokens = torch.full((batch, max_new_tokens), pad_id, dtype=torch.long, device=device)
    log_probs = torch.zeros((batch, max_new_tokens), device=device)
    lengths = torch.full((batch,), max_new_tokens, dtype=torch.long, device=device)
    live = torch.arange(batch, device=device)  # original index of each row still decoding
    steps = 0
    next_check = FIRST_CHECK
    for step in range(max_new_tokens):
        scores = sampling_logits(logits, temperature=temperature, top_k=top_k, top_p=top_p)
        logp_all = torch.log_softmax(scores, dim=-1)  # (live, vocab)
        if do_sample:
            # Every row's uniform is drawn, live or not: each row's draws do not depend on
            # when the others end.
            uniforms = uniform_draws(batch, device)[live]  # (live,) float64
            token = sample_categorical(logp_all.exp(), uniforms)  # (live,)
        else:
            token = logits.argmax(-1)  # (live,)
        row_done = done[live]
        token = token.masked_fill(row_done, pad_id)
        tokens[live, step] = token
        log_probs[live, step] = logp_all.gather(-1, token.unsqueeze(-1)).squeeze(-1)
        steps = step + 1
        # A comparison, not torch.isin: its sorting variant (many end ids) syncs on a GPU.
        ended = (token.unsqueeze(-1) == eos).any(-1) & ~row_done
        lengths[live] = torch.where(ended, step + 1, lengths[live])
        done[live] = row_done | ended
        if step + 1 == max_new_tokens or stop_requested():  # stop_requested: marft serve
            break
        if step + 1 == next_check:
            # The host looks at the rows only at steps 4, 8, 16, ...: O(log max_new_tokens)
            # synchronisations per call instead of one per token.
            next_check *= 2
            keep = (~done[live]).nonzero().squeeze(-1)  # (still,)
            if len(keep) == 0:
                break
            if len(keep) < len(live):  # finished rows leave the batch and its KV cache
                live, logits, token = live[keep], logits[keep], token[keep]
                mask, position = mask[keep], position[keep]
                if step_masks is not None:
                    step_masks = step_masks[keep]
                cache.batch_select_indices(keep)
        position = position + 1
        attention: torch.Tensor | None
        if not ready:  # transformers builds the mask, reading this one on the host
            mask = torch.cat([mask, mask.new_ones((len(live), 1))], dim=1)  # (live, P + step + 1)
            attention = mask
        elif step_masks is None:
            attention = None
        else:
            attention = step_masks[..., : prompt_width + step + 1]  # (live, 1, 1, P + step + 1)
        out = model(
            input_ids=token.unsqueeze(-1),
            attention_mask=attention,
            position_ids=position,
            past_key_values=cache,
            use_cache=True,
        )
        cache = out.past_key_values
        logits = out.logits[:, -1]
    n = lengths.clamp_max(steps).tolist()
    token_rows = tokens[:, :steps].tolist()
    logp_rows = log_probs[:, :steps].tolist()
    return Decoded(
        actions=[row[:k] for row, k in zip(token_rows, n, strict=True)],
        log_probs=[row[:k] for row, k in zip(logp_rows, n, strict=True)],
        finished=[bool(f) for f in done.tolist()],
        prefill_tokens=prefill_tokens,
        prefill_saved=sum(len(k) for k in keys) - prefill_tokens,
    )
