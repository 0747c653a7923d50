"""Prompts that begin alike, prefilled once: the plan within a batch, and a store across calls.

A team's prompts repeat their beginnings: every call of one agent opens with the same system
prompt and examples, the members of a GRPO group share one prompt, and a program's second call
to an agent repeats its first call's messages. Two things here let
:func:`~marft_algos.policy.kv_cache.prompt_caches` run such tokens once:

- :func:`shared_prefix_groups` finds, within one batch of distinct prompts, runs of prompts that
  share at least :data:`MIN_SHARED_TOKENS` leading tokens; each run's common beginning is
  prefilled once and every member continues from its keys and values;
- :class:`PrefixStore` keeps the keys and values of earlier prompts of one agent, keyed by token
  ids, so a later call reuses the longest beginning it shares with any of them. An entry is only
  valid for the weights that computed it: the store is tied to a fingerprint of the model's
  parameters (:func:`weights_fingerprint`, every parameter's storage and in-place version
  counter, which an optimizer step, ``load_state_dict`` or ``copy_`` advances) and empties itself
  when the fingerprint changes. It is bounded by a token budget, least recently used first out.

A prompt continued from a shared beginning computes as it would alone, up to float round-off:
its tokens attend to the same keys and values at the same positions. Only models with full
attention in every layer share this way (a sliding-window layer's cache is cut to its window).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence
from typing import Any, NamedTuple

import torch

__all__ = [
    "MIN_SHARED_TOKENS",
    "PREFIX_STORE_TOKENS",
    "PrefillCounter",
    "PrefixStore",
    "SharedGroup",
    "common_length",
    "forget_prompts",
    "prefix_slice",
    "shared_prefix_groups",
    "weights_fingerprint",
]

#: Fewest leading tokens worth prefilling once for several prompts, or taking from the store: a
#: shorter beginning saves less than the extra forward call and copies cost.
MIN_SHARED_TOKENS = 16

#: Default budget of a :class:`PrefixStore`, in prompt tokens kept (SmolLM2-135M: 46 KB a token
#: in float32, so about 190 MB).
PREFIX_STORE_TOKENS = 4096


def common_length(a: Sequence[int], b: Sequence[int]) -> int:
    """Number of leading tokens ``a`` and ``b`` share."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class SharedGroup(NamedTuple):
    """Prompts (indices into a batch) that continue one shared beginning of ``length`` tokens
    (0: none; each member is prefilled from its first token)."""

    length: int
    members: list[int]


def shared_prefix_groups(
    prompts: Sequence[Sequence[int]], *, min_shared: int = MIN_SHARED_TOKENS
) -> list[SharedGroup]:
    """Split distinct prompts into runs that share at least ``min_shared`` leading tokens.

    The prompts are sorted by their tokens, so prompts sharing a beginning lie next to each other;
    a run continues while a prompt shares at least ``min_shared`` tokens with the one before it,
    and its shared length is the least of those (the beginning every member has), cut so that each
    member keeps at least one token of its own (the prefill must end on the prompt's last token).
    Prompts that share too little with their neighbours come back as groups of one with length 0.

    Returns:
        Groups covering every index once.
    """
    order = sorted(range(len(prompts)), key=lambda i: list(prompts[i]))
    groups: list[SharedGroup] = []
    run: list[int] = []
    shared = 0

    def close() -> None:
        if len(run) > 1:
            length = min(shared, min(len(prompts[i]) for i in run) - 1)
            if length >= min_shared:
                groups.append(SharedGroup(length, list(run)))
                return
        groups.extend(SharedGroup(0, [i]) for i in run)

    for i in order:
        if run:
            common = common_length(prompts[run[-1]], prompts[i])
            if common >= min_shared:
                shared = min(shared, common) if len(run) > 1 else common
                run.append(i)
                continue
            close()
        run, shared = [i], 0
    if run:
        close()
    return groups


def weights_fingerprint(
    model: Any, *, base_only: bool = False
) -> tuple[tuple[int, int], ...] | None:
    """Every parameter's storage address and in-place version counter: changes whenever a
    parameter is stepped, loaded or replaced, so cached keys and values of older weights are
    recognised as stale. ``base_only``: the base model's parameters alone, without any LoRA
    adapter's (what a computation with adapters disabled depends on). None where a parameter is
    a tensor subclass (a sharded ``DTensor``), whose storage cannot be read this way: nothing is
    cached for such a model."""
    plain = (torch.nn.Parameter, torch.Tensor)
    params = [p for n, p in model.named_parameters() if not (base_only and "lora_" in n)]
    if any(type(p) not in plain for p in params):
        return None
    return tuple((p.data_ptr(), p._version) for p in params)


class PrefillCounter:
    """Prompt tokens a policy prefilled and saved since it was last read (:meth:`take`)."""

    def __init__(self) -> None:
        self.tokens = 0
        self.saved = 0

    def add(self, tokens: int, saved: int) -> None:
        self.tokens += tokens
        self.saved += saved

    def take(self) -> tuple[int, int]:
        """``(tokens, saved)`` since the last call; the counts start again from zero."""
        out = (self.tokens, self.saved)
        self.tokens = self.saved = 0
        return out


class PrefixStore:
    """Keys and values of earlier prompts, per agent state, reused by later prompts that begin
    alike (see the module docstring). One per policy, used under its generation lock.

    Args:
        max_tokens: Most prompt tokens kept over all entries (0: the store is off).
        min_shared: Fewest shared leading tokens worth reusing.
    """

    def __init__(
        self, max_tokens: int = PREFIX_STORE_TOKENS, *, min_shared: int = MIN_SHARED_TOKENS
    ) -> None:
        if max_tokens < 0:
            raise ValueError(f"max_tokens must be >= 0 (0 turns the store off), got {max_tokens}.")
        self.max_tokens = max_tokens
        self.min_shared = min_shared
        # (state key, prompt tokens) -> one-row cache, least recently used first.
        self._entries: OrderedDict[tuple[Hashable, tuple[int, ...]], Any] = OrderedDict()
        self._fingerprints: dict[Hashable, Any] = {}
        self.tokens = 0
        self.hits = 0
        self.lookups = 0

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        """Drop every entry."""
        self._entries.clear()
        self._fingerprints.clear()
        self.tokens = 0

    def validate(self, key: Hashable, fingerprint: Any) -> None:
        """Drop ``key``'s entries unless they were computed by weights with ``fingerprint``."""
        if self._fingerprints.get(key) != fingerprint:
            for stale in [k for k in self._entries if k[0] == key]:
                self._drop(stale)
            self._fingerprints[key] = fingerprint

    def longest(self, key: Hashable, prompt: Sequence[int]) -> tuple[int, Any]:
        """The longest beginning of ``prompt`` (at most all but its last token) held for ``key``.

        Returns:
            ``(length, cache)``: the shared length and a one-row cache whose first ``length``
            positions hold that beginning; ``(0, None)`` below ``min_shared``.
        """
        self.lookups += 1
        best, found = 0, None
        for entry in self._entries:
            if entry[0] == key:
                length = min(common_length(entry[1], prompt), len(prompt) - 1)
                if length > best:
                    best, found = length, entry
        if best < self.min_shared or found is None:
            return 0, None
        self._entries.move_to_end(found)
        self.hits += 1
        return best, self._entries[found]

    def add(self, key: Hashable, prompt: Sequence[int], cache: Any) -> None:
        """Keep ``prompt``'s one-row cache for ``key``. Entries it extends go; it is not kept if
        an entry already holds it. The least recently used entries go beyond the token budget."""
        if len(prompt) > self.max_tokens:
            return
        tokens = tuple(int(t) for t in prompt)
        for entry in [k for k in self._entries if k[0] == key]:
            common = common_length(entry[1], tokens)
            if common == len(tokens):  # already held, inside an entry as long or longer
                self._entries.move_to_end(entry)
                return
            if common == len(entry[1]):  # the new prompt extends it
                self._drop(entry)
        self._entries[(key, tokens)] = _detached(cache)
        self.tokens += len(tokens)
        while self.tokens > self.max_tokens:
            self._drop(next(iter(self._entries)))

    def _drop(self, entry: tuple[Hashable, tuple[int, ...]]) -> None:
        del self._entries[entry]
        self.tokens -= len(entry[1])

    def hit_rate(self) -> float:
        """Share of lookups that reused a stored beginning."""
        return self.hits / self.lookups if self.lookups else 0.0


def _detached(cache: Any) -> Any:
    from transformers.cache_utils import DynamicCache

    own = DynamicCache()
    for index, layer in enumerate(cache.layers):
        own.update(layer.keys.detach(), layer.values.detach(), index)
    return own


def prefix_slice(cache: Any, length: int, rows: int) -> Any:
    """A cache of the first ``length`` positions of a one-row cache, repeated over ``rows`` rows
    (views; transformers' layers copy them when the next tokens are appended). Differentiable."""
    from transformers.cache_utils import DynamicCache

    out = DynamicCache()
    for index, layer in enumerate(cache.layers):
        keys = layer.keys[:, :, :length].expand(rows, -1, -1, -1)
        values = layer.values[:, :, :length].expand(rows, -1, -1, -1)
        out.update(keys, values, index)
    return out


def forget_prompts(*holders: Any) -> None:
    """Drop the prompt work each holder keeps between calls (a policy's :class:`PrefixStore`, a
    critic's features), through its ``forget_prompts()``; None and holders without one are
    skipped. The trainer calls it before each rollout and evaluation, so every phase computes the
    same whatever ran before it: a resumed run repeats an uninterrupted one exactly."""
    for holder in holders:
        forget = getattr(holder, "forget_prompts", None)
        if forget is not None:
            forget()
