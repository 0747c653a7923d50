"""A KV cache for decoding that grows in place instead of concatenating at every step.

transformers' ``DynamicLayer`` appends a step's keys and values with ``torch.cat``, which copies
the whole cache of every layer at every decode step. :class:`GrowingLayer` keeps them in buffers
with spare columns (capacity doubles when full) and writes each step into the next column,
returning views of the filled part: a decode step copies one column per layer. Imported lazily
(it imports transformers) by :mod:`marft_algos.policy.decoding`.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, NamedTuple

import torch
import transformers
from packaging.version import Version
from transformers.cache_utils import DynamicCache, DynamicLayer

from marft_algos.policy.forward import (
    PackedBatch,
    decoder_module,
    full_attention_only,
    last_token_logits,
    left_pad,
)
from marft_algos.policy.prefix_cache import (
    MIN_SHARED_TOKENS,
    PrefillCounter,
    PrefixStore,
    SharedGroup,
    prefix_slice,
    shared_prefix_groups,
)

__all__ = [
    "MIN_TRANSFORMERS",
    "GrowingLayer",
    "Prefilled",
    "check_transformers",
    "growing_cache",
    "left_padded_cache",
    "prompt_caches",
    "shared_prompt_action_logits",
]


#: The first transformers release whose cache layers take ``get_mask_sizes(query_length)``, the
#: signature :class:`GrowingLayer` overrides (5.0-5.3 pass ``cache_position`` and fail inside
#: transformers' masking; measured: the decoding tests fail on 5.3.0 and pass on 5.4.0). The floor
#: in pyproject.toml.
MIN_TRANSFORMERS = "5.4"


def check_transformers(version: str) -> None:
    """Refuse a transformers release older than :data:`MIN_TRANSFORMERS` in one line (an
    inference engine's wheel can pull an older one in), instead of a TypeError deep inside it."""
    if Version(version) < Version(MIN_TRANSFORMERS):
        raise ImportError(
            f"marft needs transformers>={MIN_TRANSFORMERS}, found {version} (another package, such "
            f"as a vllm wheel, may have installed it); run: pip install 'transformers>={MIN_TRANSFORMERS}'."
        )


check_transformers(transformers.__version__)


class GrowingLayer(DynamicLayer):
    """One layer's keys and values, ``(batch, heads, capacity, head_dim)``, filled up to ``length``."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.length = 0

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        new = key_states.shape[-2]
        keys, values = self.keys, self.values
        if not self.is_initialized or keys is None or values is None:
            self.lazy_initialization(key_states, value_states)
            self.keys, self.values, self.length = key_states, value_states, new
            return key_states, value_states
        end = self.length + new
        if end > keys.shape[-2]:
            capacity = max(end, 2 * keys.shape[-2])
            keys = self.keys = _grown(keys, self.length, capacity)
            values = self.values = _grown(values, self.length, capacity)
        keys[..., self.length : end, :] = key_states
        values[..., self.length : end, :] = value_states
        self.length = end
        return keys[..., :end, :], values[..., :end, :]

    def get_seq_length(self) -> int:
        return self.length if self.is_initialized else 0

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.get_seq_length() + query_length, 0

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep the rows ``indices`` in that order (a repeated index copies its row)."""
        if self.keys is not None and self.values is not None and self.get_seq_length() > 0:
            self.keys = self.keys[indices, :, : self.length]
            self.values = self.values[indices, :, : self.length]

    def batch_repeat_interleave(self, repeats: int) -> None:
        if self.keys is not None and self.get_seq_length() > 0:
            rows = torch.arange(self.keys.shape[0], device=self.keys.device)
            self.batch_select_indices(rows.repeat_interleave(repeats))

    def crop(self, tokens_to_remove: int) -> None:
        raise NotImplementedError("A GrowingLayer cache is for decoding only; it does not crop.")


def _grown(buffer: torch.Tensor, filled: int, capacity: int) -> torch.Tensor:
    shape = list(buffer.shape)
    shape[-2] = capacity
    out = buffer.new_empty(shape)
    out[..., :filled, :] = buffer[..., :filled, :]
    return out


#: Largest share of padding a batch of prompts prefilled together may hold (:func:`prompt_caches`).
PREFILL_PADDING = 0.25


class Prefilled(NamedTuple):
    """What :func:`prompt_caches` computed.

    Attributes:
        caches: One single-row ``DynamicCache`` per prompt, all its positions.
        last: ``(prompts, vocab)`` logits after each prompt's last token (``hidden``: its
            ``(prompts, hidden)`` last hidden states, after the final norm).
        tokens: Prompt tokens run through the model.
        reused: Prompt tokens taken from a shared beginning instead (within the batch or from a
            :class:`~marft_algos.policy.prefix_cache.PrefixStore`).
    """

    caches: list[Any]
    last: torch.Tensor
    tokens: int
    reused: int


def prompt_caches(
    model: Any,
    prompts: list[list[int]],
    *,
    max_padding: float = PREFILL_PADDING,
    min_shared: int | None = MIN_SHARED_TOKENS,
    store: PrefixStore | None = None,
    store_key: Hashable = None,
    hidden: bool = False,
) -> Prefilled:
    """Run distinct prompts in few batches; each prompt's KV cache and the logits after its last token.

    Prompts that share at least ``min_shared`` leading tokens (None: identical prompts only)
    (:func:`~marft_algos.policy.prefix_cache.shared_prefix_groups`) run their common beginning
    once; each then continues from those keys and values. With a ``store``, a beginning is first
    looked up among earlier prompts of ``store_key`` (its weights checked by the caller), and every
    prompt's cache is kept there afterwards. The rest is prefilled in left-padded batches of
    similar lengths, each holding at most ``max_padding`` padding (0: equal lengths only), with
    positions counting real tokens only, so each prompt computes as it would alone (up to
    round-off); each prompt's keys and values are then cut out of its batch without the padding.
    Differentiable when gradients are enabled (the update's shared prompts): the gradient of a
    shared beginning's activations sums over the prompts that continue it. ``hidden``: the
    decoder's last hidden states at each prompt's last token instead of logits (a critic's
    values), the output layer not run.
    """
    caches: list[Any] = [None] * len(prompts)
    logits: list[Any] = [None] * len(prompts)
    tokens = 0
    shared: list[tuple[int, Any, list[int]]] = []  # (length, one-row cache or None, members)
    alone: list[int] = []  # prompts that share no beginning: prefilled together
    groups = (
        shared_prefix_groups(prompts, min_shared=min_shared)
        if min_shared is not None
        else [SharedGroup(0, list(range(len(prompts))))]
    )
    for group in groups:
        length, prefix = group.length, None
        if store is not None:
            beginning = prompts[group.members[0]]
            if length == 0:  # a prompt of its own: the store may still hold its beginning
                length, prefix = store.longest(store_key, beginning)
            else:
                held, stored = store.longest(store_key, beginning[: length + 1])
                if held >= length:
                    prefix = stored
                elif stored is not None:  # the store holds part of the group's beginning
                    (prefix,), _ = _continued(
                        model, stored, held, [beginning[held:length]], max_padding, hidden
                    )
                    tokens += length - held
        if length == 0:
            alone.extend(group.members)
        else:
            shared.append((length, prefix, group.members))
    if alone:
        shared.insert(0, (0, None, alone))
    for length, prefix, members in shared:
        if length and prefix is None:
            beginning = prompts[members[0]][:length]
            (prefix,), _ = _continued(model, None, 0, [beginning], max_padding, hidden)
            tokens += length
        suffixes = [prompts[i][length:] for i in members]
        keep = not hidden or store is not None  # a critic's features need no caches
        own, last = _continued(model, prefix, length, suffixes, max_padding, hidden, keep)
        tokens += sum(len(s) for s in suffixes)
        for j, i in enumerate(members):
            caches[i], logits[i] = own[j], last[j : j + 1]
    if store is not None:
        for prompt, cache in zip(prompts, caches, strict=True):
            store.add(store_key, prompt, cache)
    reused = sum(len(p) for p in prompts) - tokens
    return Prefilled(caches, torch.cat(logits), tokens, reused)


def _continued(
    model: Any,
    prefix: Any,
    length: int,
    suffixes: list[list[int]],
    max_padding: float,
    hidden: bool = False,
    keep: bool = True,
) -> tuple[list[Any], torch.Tensor]:
    """Each suffix run on top of the first ``length`` positions of the one-row cache ``prefix``
    (None: from the first position), in left-padded batches of similar lengths.

    Returns:
        One single-row ``DynamicCache`` per suffix (the prefix's positions, then the suffix's;
        None without ``keep``) and
        ``(len(suffixes), vocab)`` logits after each suffix's last token (``hidden``: the last
        hidden states there).
    """
    device = next(model.parameters()).device
    caches: list[Any] = [None] * len(suffixes)
    logits: list[Any] = [None] * len(suffixes)
    for bucket in _length_buckets([len(s) for s in suffixes], max_padding):
        ids, mask = left_pad([suffixes[i] for i in bucket], 0, device)  # (n, W); pad id masked
        n, width = ids.shape
        positions = (mask.cumsum(-1) - 1).clamp_min(0) + length  # (n, W)
        if prefix is None:
            past, full_mask = DynamicCache(), mask
        else:
            # The padding sits between the shared beginning and each suffix, masked out.
            past = prefix_slice(prefix, length, n)
            full_mask = torch.cat([mask.new_ones((n, length)), mask], dim=1)  # (n, length + W)
        run = _last_hidden if hidden else last_token_logits
        last, cache = run(
            model,
            input_ids=ids,
            attention_mask=full_mask,
            position_ids=positions,
            past_key_values=past,
            use_cache=True,
        )  # last: (n, vocab)
        for j, i in enumerate(bucket):
            logits[i] = last[j : j + 1]
            if not keep:
                continue
            start = length + width - len(suffixes[i])
            own = DynamicCache()
            for index, layer in enumerate(cache.layers):
                keys, values = (
                    layer.keys[j : j + 1],
                    layer.values[j : j + 1],
                )  # (1, H, length + W, D)
                if length:
                    keys = torch.cat([keys[:, :, :length], keys[:, :, start:]], dim=2)
                    values = torch.cat([values[:, :, :length], values[:, :, start:]], dim=2)
                else:
                    keys, values = keys[:, :, start:], values[:, :, start:]
                own.update(keys, values, index)  # (1, H, L, D)
            caches[i] = own
    return caches, torch.cat(logits)


def _last_hidden(model: Any, **inputs: Any) -> tuple[torch.Tensor, Any]:
    """The decoder's last hidden states at the last column, ``(batch, hidden)``, and the cache."""
    out = decoder_module(model)(**inputs)
    return out.last_hidden_state[:, -1], out.past_key_values


def _length_buckets(lengths: list[int], max_padding: float) -> list[list[int]]:
    """Indices grouped by length so that each group, left-padded, is at most ``max_padding`` pad."""
    buckets: list[list[int]] = []
    total = 0
    for i in sorted(range(len(lengths)), key=lengths.__getitem__):
        if buckets:
            n, width = len(buckets[-1]) + 1, lengths[i]  # sorted: this prompt is the widest
            if 1 - (total + width) / (n * width) <= max_padding:
                buckets[-1].append(i)
                total += width
                continue
        buckets.append([i])
        total = lengths[i]
    return buckets


def left_padded_cache(
    caches: list[Any], rows: torch.Tensor, width: int, *, growing: bool
) -> DynamicCache:
    """One cache for a batch whose row ``i`` continues prompt ``rows[i]``, prompts left-padded.

    Keys and values of a prompt of length ``L`` sit in the last ``L`` of ``width`` columns (the
    padding is zero and masked out by the attention mask), as if the padded batch had been run.

    Args:
        caches: One single-row cache per prompt (:func:`prompt_caches`).
        rows: ``(batch,)`` index of each row's prompt.
        width: The padded prompt width (the longest prompt).
        growing: Build :class:`GrowingLayer` layers (decoding); otherwise transformers' own
            (differentiable updates: the update's action forward appends with ``torch.cat``).
    """
    cache = DynamicCache()
    if growing:
        cache.layer_class_to_replicate = GrowingLayer
    for layer in range(len(caches[0].layers)):
        padded = []
        for part in ("keys", "values"):
            states = [getattr(c.layers[layer], part) for c in caches]  # (1, H, L, D) each
            stacked = torch.cat(
                [torch.nn.functional.pad(x, (0, 0, width - x.shape[-2], 0)) for x in states]
            )  # (prompts, H, width, D)
            padded.append(stacked[rows])  # (batch, H, width, D)
        cache.update(padded[0], padded[1], layer)
    return cache


def growing_cache(config: Any) -> DynamicCache:
    """A ``DynamicCache`` of :class:`GrowingLayer` layers for a model with full attention only.

    Models with sliding-window or other layer types get transformers' own cache for their
    configuration (their layers need the matching cache classes).
    """
    if not full_attention_only(config):
        return DynamicCache(config=config)
    cache = DynamicCache()
    cache.layer_class_to_replicate = GrowingLayer
    return cache


def shared_prompt_action_logits(
    model: Any,
    batch: PackedBatch,
    *,
    min_shared: int | None = MIN_SHARED_TOKENS,
    counter: PrefillCounter | None = None,
) -> torch.Tensor:
    """`action_logits` with each distinct prompt run once, alone, and shared by its rows.

    The rows of a GRPO group share their prompt. Each distinct prompt is run once without padding
    (:func:`prompt_caches`); its keys and values are copied to its
    rows in the padded layout of ``batch``, and the actions run on top of them. Differentiable:
    the gradient of a shared prompt's activations sums over its rows, as if each row had run it.
    For models with full attention in every layer
    (:func:`~marft_algos.policy.forward.full_attention_only`). Prompts of different rows that
    begin alike run their beginning once (``min_shared``, as :func:`prompt_caches`); ``counter``
    adds the prompt tokens run and those not run.

    Returns:
        ``(batch, T, vocab)`` logits predicting each action token.
    """
    width, prompt_width = batch.action_ids.shape[1], batch.prompt_width
    # One copy to the host for the whole block, not one per row.
    ids_rows = batch.input_ids[:, :prompt_width].tolist()
    real_rows = batch.attention_mask[:, :prompt_width].tolist()
    keys = [
        tuple(t for t, m in zip(row, real, strict=True) if m)
        for row, real in zip(ids_rows, real_rows, strict=True)
    ]
    distinct: dict[tuple[int, ...], int] = {}
    rows = torch.tensor(
        [distinct.setdefault(k, len(distinct)) for k in keys], device=batch.input_ids.device
    )
    prompts = [list(k) for k in distinct]
    caches, last, run, _ = prompt_caches(model, prompts, min_shared=min_shared)  # (U, vocab)
    if counter is not None:
        counter.add(run, sum(len(k) for k in keys) - run)
    first = last[rows].unsqueeze(1)  # (batch, 1, vocab): predicts action token 0
    if width <= 1:
        return first[:, :width]
    cache = left_padded_cache(caches, rows, prompt_width, growing=False)
    end = prompt_width + width - 1  # the last action token predicts nothing
    out = model(
        input_ids=batch.input_ids[:, prompt_width:end],
        attention_mask=batch.attention_mask[:, :end],
        position_ids=batch.position_ids[:, prompt_width:end],
        past_key_values=cache,
        use_cache=True,
    )
    return torch.cat([first, out.logits], dim=1)  # (batch, T, vocab)
