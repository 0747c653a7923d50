"""Batch layout and forward passes shared by generation, training and the critic.

Every forward over ``prompt + action`` uses one layout, the one ``model.generate`` sees during
rollout: prompts are **left**-padded so that they all end at column ``P`` (the widest prompt),
actions start at column ``P`` and are **right**-padded to the longest action ``T``::

    [pad pad p p p p | a a a a pad]
    [p p p p p p p p | a a pad pad]
     <---- P ------->  <--- T --->

Position ids count only real tokens (``cumsum(attention_mask) - 1``), as ``generate`` does, so a
token's logits do not depend on how much padding its row received. The logits that predict action
token ``t`` sit at column ``P - 1 + t``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import torch

from marft_algos.common.log_probs import entropy_from_log_probs

__all__ = [
    "PackedBatch",
    "action_logits",
    "decoder_hidden_states",
    "full_attention_only",
    "last_token_logits",
    "left_pad",
    "log_probs_and_entropy",
    "pack",
    "sampling_logits",
    "unwrap_causal_lm",
]


class PackedBatch(NamedTuple):
    """A padded ``prompt + action`` batch (see the module docstring for the layout)."""

    input_ids: torch.Tensor  # (batch, P + T)
    attention_mask: torch.Tensor  # (batch, P + T)
    position_ids: torch.Tensor  # (batch, P + T)
    action_ids: torch.Tensor  # (batch, T), pad where action_mask is False
    action_mask: torch.Tensor  # (batch, T) bool
    prompt_width: int  # P


def left_pad(
    sequences: Sequence[Sequence[int]], pad_id: int, device: torch.device | str
) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad token id lists into ``(input_ids, attention_mask)``, both ``(batch, max_len)``."""
    if not sequences:
        raise ValueError("Empty batch: pass at least one prompt.")
    width = max(len(s) for s in sequences)
    if width == 0 or any(len(s) == 0 for s in sequences):
        raise ValueError("Every prompt needs at least one token; got an empty prompt.")
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for i, seq in enumerate(sequences):
        ids[i, width - len(seq) :] = torch.as_tensor(list(seq), dtype=torch.long)
        mask[i, width - len(seq) :] = 1
    return ids.to(device), mask.to(device)


def pack(
    prompt_ids: Sequence[Sequence[int]],
    action_ids: Sequence[Sequence[int]],
    pad_id: int,
    device: torch.device | str,
) -> PackedBatch:
    """Lay out prompts and actions as ``[left-padded prompt | right-padded action]`` rows."""
    if len(prompt_ids) != len(action_ids):
        raise ValueError(
            f"prompt_ids and action_ids must have the same batch size, got {len(prompt_ids)} and "
            f"{len(action_ids)}."
        )
    prompts, prompt_mask = left_pad(prompt_ids, pad_id, "cpu")  # (batch, P)
    width = max((len(a) for a in action_ids), default=0)
    actions = torch.full((len(action_ids), width), pad_id, dtype=torch.long)  # (batch, T)
    action_mask = torch.zeros((len(action_ids), width), dtype=torch.bool)  # (batch, T)
    for i, act in enumerate(action_ids):
        if len(act):
            actions[i, : len(act)] = torch.as_tensor(list(act), dtype=torch.long)
            action_mask[i, : len(act)] = True
    input_ids = torch.cat([prompts, actions], dim=1)  # (batch, P + T)
    attention_mask = torch.cat([prompt_mask, action_mask.long()], dim=1)  # (batch, P + T)
    # Same convention as transformers' generate: positions of real tokens count from 0; padding
    # gets 0 (it is masked out, so its position never matters).
    position_ids = (attention_mask.cumsum(-1) - 1).clamp_min(0)  # (batch, P + T)
    return PackedBatch(
        input_ids=input_ids.to(device),
        attention_mask=attention_mask.to(device),
        position_ids=position_ids.to(device),
        action_ids=actions.to(device),
        action_mask=action_mask.to(device),
        prompt_width=prompts.shape[1],
    )


def unwrap_causal_lm(model: Any) -> Any:
    """The transformers causal LM inside a peft wrapper (LoRA layers stay injected in it)."""
    get_base = getattr(model, "get_base_model", None)
    return get_base() if callable(get_base) else model


def decoder_module(model: Any) -> Any:
    """The decoder stack of a causal LM (peft-wrapped or not): its forward returns the last
    hidden states after the final norm, without the output layer."""
    causal_lm = unwrap_causal_lm(model)
    decoder = None
    get_decoder = getattr(causal_lm, "get_decoder", None)
    if callable(get_decoder):
        decoder = get_decoder()
    if decoder is None or decoder is causal_lm:
        decoder = getattr(causal_lm, causal_lm.base_model_prefix)
    return decoder


def decoder_hidden_states(model: Any, batch: PackedBatch) -> torch.Tensor:
    """Last hidden states (after the final norm) of a causal LM, without computing logits.

    Args:
        model: A transformers causal LM, or a peft model wrapping one.
        batch: The packed input.

    Returns:
        ``(batch, P + T, hidden)`` hidden states.
    """
    out = decoder_module(model)(
        input_ids=batch.input_ids,
        attention_mask=batch.attention_mask,
        position_ids=batch.position_ids,
        use_cache=False,
    )
    return out.last_hidden_state


def action_logits(model: Any, batch: PackedBatch) -> torch.Tensor:
    """Logits predicting each action token, ``(batch, T, vocab)``.

    Runs the full causal LM forward (so model-specific output processing such as logit
    soft-capping applies) but asks it for logits only at the ``T`` predicting columns
    (``logits_to_keep``), which keeps memory at ``T x vocab`` instead of ``(P + T) x vocab``.
    """
    width = batch.action_ids.shape[1]
    start = batch.prompt_width - 1
    keep = torch.arange(start, start + width, device=batch.input_ids.device)  # (T,)
    inputs = {
        "input_ids": batch.input_ids,
        "attention_mask": batch.attention_mask,
        "position_ids": batch.position_ids,
        "use_cache": False,
    }
    try:
        out = model(**inputs, logits_to_keep=keep)
    except TypeError:
        # Architectures without ``logits_to_keep`` return every column; sliced below.
        out = model(**inputs)
    logits = out.logits
    if logits.shape[1] != width:
        logits = logits[:, start : start + width]
    return logits  # (batch, T, vocab)


def full_attention_only(config: Any) -> bool:
    """Whether every layer of the model attends to its whole context (no sliding window etc.)."""
    layer_types = getattr(config, "layer_types", None)
    if layer_types and any(t != "full_attention" for t in layer_types):
        return False
    return not getattr(config, "use_sliding_window", False)


def last_token_logits(model: Any, **inputs: Any) -> tuple[torch.Tensor, Any]:
    """Run ``model(**inputs)`` keeping only the last column's logits; ``(logits, cache)``.

    ``logits`` is ``(batch, vocab)``; the cache is the output's ``past_key_values``.
    """
    try:
        out = model(**inputs, logits_to_keep=1)
    except TypeError:
        # Architectures without ``logits_to_keep`` return every column.
        out = model(**inputs)
    return out.logits[:, -1], out.past_key_values


def sampling_logits(
    logits: torch.Tensor, *, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0
) -> torch.Tensor:
    """The logits of the distribution ``generate`` samples from, in float32.

    Applies the same warpers as transformers' sampling, in its order: temperature, then top-k, then
    top-p (nucleus). Tokens cut by top-k or top-p get ``-inf``, so ``log_softmax`` of the result is
    the truncated, renormalised distribution actually sampled. The warpers are transformers' own,
    so rollout and update cut exactly the tokens ``generate`` cuts. Differentiable in the kept
    entries.

    Args:
        logits: ``(..., vocab)`` raw logits.
        temperature: Softmax temperature (> 0).
        top_k: Keep the ``top_k`` most likely tokens (0: off).
        top_p: Keep the smallest set of tokens with probability mass ``top_p`` (1: off).

    Returns:
        ``(..., vocab)`` processed logits.
    """
    from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper

    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 for log-probs, got {temperature}.")
    scores = logits.float()
    if temperature != 1.0:
        scores = scores / temperature
    if top_k == 0 and top_p >= 1.0:
        return scores
    shape = scores.shape
    flat = scores.reshape(-1, shape[-1])  # (rows, vocab): the warpers take 2-D scores
    if top_k:
        flat = TopKLogitsWarper(top_k=int(top_k))(None, flat)
    if top_p < 1.0:
        flat = TopPLogitsWarper(top_p=float(top_p))(None, flat)
    return flat.reshape(shape)


def log_probs_and_entropy(
    logits: torch.Tensor,
    targets: torch.Tensor,
    mask: torch.Tensor,
    *,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    with_entropy: bool = False,
    differentiable_entropy: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-token log-probs of ``targets`` under the sampling distribution, in float32.

    The distribution is ``softmax(sampling_logits(logits, temperature, top_k, top_p))`` (see
    :func:`sampling_logits`). A target outside the top-k / top-p set has log-prob ``-inf``.
    Without a top-k/top-p cut the float32 work runs over :data:`LOG_PROB_CHUNK` rows at a time
    and the backward pass keeps only the logits in their own dtype plus two floats per token
    (:class:`_ChunkedLogProbs`), instead of float32 ``(batch, T, vocab)`` tensors.

    Args:
        logits: ``(batch, T, vocab)`` raw logits.
        targets: ``(batch, T)`` token ids.
        mask: ``(batch, T)`` bool; masked entries of the outputs are 0.
        temperature: Logits are divided by it before the softmax.
        top_k: Top-k truncation (0: off).
        top_p: Nucleus truncation (1: off).
        with_entropy: Also return the entropy of each token's distribution (finite: cut tokens
            contribute 0).
        differentiable_entropy: False: compute the entropy without autograd (for logging: no
            graph, no full-vocabulary tensors kept for the backward pass).

    Returns:
        ``(log_probs, entropy)``, each ``(batch, T)``; ``entropy`` is None unless requested.
    """
    if top_k == 0 and top_p >= 1.0:
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0 for log-probs, got {temperature}.")
        logp, entropy = _chunked_log_probs(logits, targets, temperature, with_entropy)
        if entropy is not None and not differentiable_entropy:
            entropy = entropy.detach()
        return logp.masked_fill(~mask, 0.0), (
            None if entropy is None else entropy.masked_fill(~mask, 0.0)
        )
    scaled = sampling_logits(logits, temperature=temperature, top_k=top_k, top_p=top_p)
    logp_all = torch.log_softmax(scaled, dim=-1)  # (batch, T, vocab)
    logp = logp_all.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # (batch, T)
    logp = logp.masked_fill(~mask, 0.0)
    entropy = None
    if with_entropy and differentiable_entropy:
        entropy = entropy_from_log_probs(logp_all)  # (batch, T)
        entropy = entropy.masked_fill(~mask, 0.0)
    elif with_entropy:
        with torch.no_grad():
            logp_d = logp_all.detach()
            # Cut tokens: p = 0 and log p clamped finite, so they add exactly 0.
            entropy = -torch.linalg.vecdot(
                logp_d.exp(), logp_d.clamp_min(torch.finfo(logp_d.dtype).min)
            )  # (batch, T)
        entropy = entropy.masked_fill(~mask, 0.0)
    return logp, entropy


#: Rows (action tokens) whose float32 scores :class:`_ChunkedLogProbs` holds at once: the
#: transient memory is about 3 x 4 bytes x LOG_PROB_CHUNK x vocab (56 MB at a 152k vocabulary).
LOG_PROB_CHUNK = 32


def _chunked_log_probs(
    logits: torch.Tensor, targets: torch.Tensor, temperature: float, with_entropy: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(batch, T)`` log-probs of ``targets`` under ``softmax(logits / temperature)`` and, if
    asked, the entropies; see :class:`_ChunkedLogProbs`."""
    shape = targets.shape
    flat = logits.reshape(-1, logits.shape[-1])  # (rows, vocab)
    logp, entropy = _ChunkedLogProbs.apply(
        flat, targets.reshape(-1), float(temperature), bool(with_entropy)
    )
    return logp.reshape(shape), (entropy.reshape(shape) if with_entropy else None)


class _ChunkedLogProbs(torch.autograd.Function):
    """Token log-probs (and entropies) of temperature-scaled logits, chunked over rows.

    Forward: per chunk of :data:`LOG_PROB_CHUNK` rows, ``z = logits.float() / T``,
    ``lse = logsumexp(z)``, ``log p = z - lse`` and ``H = -Σ p log p``. Saved for backward:
    the logits as given (bf16 on a GPU: 2 bytes per vocabulary entry, which the LM head's output
    holds anyway), ``lse`` and ``H``. Backward recomputes ``p = exp(z - lse)`` per chunk:
    ``∂ log p(t)/∂z = onehot(t) - p`` and ``∂H/∂z = -p (log p + H)``, each divided by ``T`` for
    the logits. log_softmax, by contrast, keeps its float32 output (4 bytes per entry) and an
    entropy bonus about three more such tensors.
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, logits: torch.Tensor, targets: torch.Tensor, temperature: float, entropy: bool
    ) -> tuple[torch.Tensor, torch.Tensor]:
        rows = logits.shape[0]
        logp = torch.empty(rows, dtype=torch.float32, device=logits.device)
        lse = torch.empty_like(logp)
        ent = torch.zeros_like(logp)
        for start in range(0, rows, LOG_PROB_CHUNK):
            end = min(start + LOG_PROB_CHUNK, rows)
            z = logits[start:end].float() / temperature  # (chunk, vocab)
            norm = torch.logsumexp(z, dim=-1)  # (chunk,)
            lse[start:end] = norm
            logp[start:end] = z.gather(-1, targets[start:end].unsqueeze(-1)).squeeze(-1) - norm
            if entropy:
                logp_all = z - norm.unsqueeze(-1)  # (chunk, vocab)
                ent[start:end] = -torch.linalg.vecdot(logp_all.exp(), logp_all)
        ctx.save_for_backward(logits, targets, lse, ent)
        ctx.temperature, ctx.entropy = temperature, entropy
        return logp, ent

    @staticmethod
    def backward(  # type: ignore[override]
        ctx: Any, grad_logp: torch.Tensor, grad_ent: torch.Tensor | None
    ) -> tuple[torch.Tensor, None, None, None]:
        logits, targets, lse, ent = ctx.saved_tensors
        temperature = ctx.temperature
        grad = torch.empty_like(logits)
        for start in range(0, logits.shape[0], LOG_PROB_CHUNK):
            end = min(start + LOG_PROB_CHUNK, logits.shape[0])
            z = logits[start:end].float() / temperature  # (chunk, vocab)
            logp_all = z - lse[start:end].unsqueeze(-1)
            p = torch.exp(logp_all)
            g = grad_logp[start:end].unsqueeze(-1)  # (chunk, 1)
            gz = -p * g
            gz.scatter_add_(-1, targets[start:end].unsqueeze(-1), g)
            if ctx.entropy and grad_ent is not None:
                h = ent[start:end].unsqueeze(-1)
                gz -= grad_ent[start:end].unsqueeze(-1) * p * (logp_all + h)
            grad[start:end] = (gz / temperature).to(grad.dtype)
        return grad, None, None, None
