"""How long an agent's rendered prompt is, counted before anything is generated.

:class:`PolicyMeter` is the policy's side of :class:`~marft_envs.wire.prompts.PromptMeter`: the
endpoints and the in-process client ask it, call by call, whether a prompt fits
(:class:`~marft_envs.wire.prompts.PromptBudget`).

- **Context length**: the model config's ``max_position_embeddings`` (``n_positions``,
  ``max_sequence_length`` or ``seq_length`` where a model names it so): the positions the weights
  were built and trained for, past which a model with learned positions fails and one with rotary
  positions degrades. The tokenizer's ``model_max_length`` is only a default of the tokenizer: a
  placeholder (``int(1e30)``) when unset, and not always the model's (``marft-tiny-math``: 4096
  against 1024 positions); it is read only when the config has none.
- **Bounded work**: no token of a vocabulary spells more than ``L`` characters (the longest token,
  :func:`longest_token_chars`), so a rendered prompt of ``c`` characters holds at least
  ``c / L`` tokens; with a factor 2 for normalisers that merge characters, a prompt past
  ``2 L (limit + 1)`` characters is refused without being tokenised. A body of 4 MiB is judged in
  the time its chat template takes to render (tens of milliseconds), and what is tokenised is at
  most ``2 L`` characters per allowed token.
"""

from __future__ import annotations

import contextlib
import copy
import math
import threading
import weakref
from collections.abc import Sequence
from typing import Any

from marft_algos.policy.rendering import render_prompt_ids, render_prompt_text

__all__ = ["PolicyMeter", "context_length", "longest_token_chars", "policy_meter"]

#: Config fields that hold a model's positions, by model family.
_POSITION_FIELDS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")
#: A ``model_max_length`` at or past this is transformers' "no limit" placeholder.
_NO_LIMIT = int(1e20)
#: Headroom of the character bound over the longest token (Unicode normalisers merge characters).
_MERGE_FACTOR = 2

_LONGEST: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


def context_length(model: Any, tokenizer: Any = None) -> int | None:
    """Tokens a model reads and writes in one sequence: its config's positions, else the
    tokenizer's ``model_max_length`` when that is a real bound (None: neither says)."""
    config = getattr(model, "config", None)
    for name in _POSITION_FIELDS:
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    value = getattr(tokenizer, "model_max_length", None)
    return value if isinstance(value, int) and 0 < value < _NO_LIMIT else None


def longest_token_chars(tokenizer: Any) -> int:
    """Characters of the vocabulary's longest token (as stored and as decoded), special tokens
    included; computed once per tokenizer."""
    try:
        return _LONGEST[tokenizer]
    except (KeyError, TypeError):
        pass
    ids = list(range(len(tokenizer)))
    stored = tokenizer.convert_ids_to_tokens(ids)
    decoded = tokenizer.batch_decode([[i] for i in ids])
    longest = max(max(len(str(t or "")) for t in stored), max(len(t) for t in decoded), 1)
    with contextlib.suppress(TypeError):  # a tokenizer that takes no weak reference
        _LONGEST[tokenizer] = longest
    return longest


class PolicyMeter:
    """Counts agents' rendered prompts on copies of their tokenizers (a fast tokenizer refuses two
    encodes at once, and the policy's own renders its rollouts meanwhile).

    Args:
        policy: A :class:`~marft_algos.policy.MultiAgentPolicy` (``tokenizer(agent)`` and
            ``backbone(agent).model``).
    """

    def __init__(self, policy: Any) -> None:
        self._policy = policy
        self._copies: dict[int, tuple[Any, threading.Lock]] = {}
        self._lock = threading.Lock()

    def context_length(self, agent: str) -> int | None:
        """The agent's model's context length (:func:`context_length`)."""
        model = getattr(self._policy.backbone(agent), "model", None)
        return context_length(model, self._policy.tokenizer(agent))

    def measure(self, agent: str, observation: Any, limit: int) -> tuple[int, list[int] | None]:
        """``(tokens, ids)`` of the rendered prompt, or ``(a lower bound above limit, None)``
        when its characters alone show that it passes ``limit``."""
        tokenizer, lock = self._copy(agent)
        with lock:
            text = render_prompt_text(tokenizer, observation)
            most_chars = _MERGE_FACTOR * longest_token_chars(tokenizer)
            if len(text) > most_chars * (limit + 1):
                return math.ceil(len(text) / most_chars), None
            ids = render_prompt_ids(tokenizer, observation)
        return len(ids), ids

    def _copy(self, agent: str) -> tuple[Any, threading.Lock]:
        original = self._policy.tokenizer(agent)
        with self._lock:
            found = self._copies.get(id(original))
            if found is None:
                found = self._copies[id(original)] = (copy.deepcopy(original), threading.Lock())
            return found


def policy_meter(policy: Any, agents: Sequence[str] = ()) -> PolicyMeter | None:
    """A meter of ``policy``'s prompts, looking through wrappers that hold the policy as
    ``.policy``; None when no policy with tokenizers is found (a scripted stand-in)."""
    for _ in range(4):
        if callable(getattr(policy, "tokenizer", None)) and callable(
            getattr(policy, "backbone", None)
        ):
            meter = PolicyMeter(policy)
            try:
                for agent in agents:
                    meter.context_length(agent)
            except (KeyError, AttributeError):
                return None
            return meter
        policy = getattr(policy, "policy", None)
        if policy is None:
            return None
    return None
