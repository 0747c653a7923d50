"""Sequence-level ratios (GSPO, TRL's ``importance_sampling_level="sequence"``): the trainers'
loss and gradient against an independent implementation of TRL's definition on the built-in
model, under every ``loss_type``, with stale decisions and with ``max_chunk_tokens``."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch
from test_stale_objective import _gradients
from test_trainers import build

from marft_algos.common.losses import clipped_surrogate

CAP = 6  # max_new_tokens of test_trainers.SMALL: dr_grpo's constant length


def _hand_sequence_loss(new, prox, behav, adv, *, eps, cap):
    """TRL's GSPO row loss: ratio exp(mean_t(new − prox)), clipped, times min(π_prox/π_behav, cap)
    per token; returns the per-token losses of the row."""
    s = sum(n - p for n, p in zip(new, prox, strict=True)) / len(new)
    ratio = math.exp(s)
    clipped = min(max(ratio, 1 - eps), 1 + eps)
    core = -min(ratio * adv, clipped * adv)
    return [min(math.exp(p - b), cap) * core for p, b in zip(prox, behav, strict=True)]


def test_a_sequence_ratio_matches_a_hand_computation():
    new = [[-0.9, -2.0, -0.6], [-1.0, -0.1, 0.0]]
    prox = [[-1.0, -2.2, -0.5], [-1.3, -0.2, 0.0]]
    behav = [[-1.05, -2.3, -0.45], [-1.2, -0.9, 0.0]]
    mask = torch.tensor([[True, True, True], [True, True, False]])
    adv = [1.0, -2.0]
    per_entry, terms = clipped_surrogate(
        torch.tensor(new, dtype=torch.float64),
        torch.tensor(behav, dtype=torch.float64),
        torch.tensor(adv, dtype=torch.float64),
        mask,
        epsilon=0.2,
        proximal_log_probs=torch.tensor(prox, dtype=torch.float64),
        behaviour_weight_cap=1.1,
        importance_sampling_level="sequence",
    )
    row0 = _hand_sequence_loss(new[0], prox[0], behav[0], 1.0, eps=0.2, cap=1.1)
    row1 = _hand_sequence_loss(new[1][:2], prox[1][:2], behav[1][:2], -2.0, eps=0.2, cap=1.1)
    want = torch.tensor([row0, [*row1, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(per_entry, want)
    # One ratio per row, shared by its tokens.
    assert float(terms["ratio_mean"][1, 0]) == pytest.approx(math.exp((0.3 + 0.1) / 2))


def _independent_loss(trainer, batch, advantages, loss_type, proximal=None):
    """TRL's GSPO loss written out: per agent, log-probs with gradient, one ratio per sequence,
    the row's loss on each of its tokens, aggregated over the whole batch by ``loss_type``."""
    c = trainer.config
    total_tokens = float(batch.action_mask.sum())
    total_rows = float(len(batch))
    loss = torch.zeros(())
    for agent in dict.fromkeys(batch.agents):
        rows = batch.indices_of(agent)
        part = batch[rows]
        lp = trainer.policy.token_log_probs(
            agent, list(part.prompt_ids), part.action_lists(), **c.sampling
        )
        mask = lp.mask
        width = mask.shape[1]
        old = part.old_log_probs[:, :width]
        prox = old if proximal is None else proximal[rows][:, :width]
        m = mask.float()
        seq = ((lp.log_probs - prox) * m).sum(-1, keepdim=True) / m.sum(-1, keepdim=True)
        ratio = torch.exp(seq)
        adv = advantages[rows].unsqueeze(-1)
        core = -torch.min(ratio * adv, torch.clamp(ratio, 1 - c.epsilon, 1 + c.epsilon) * adv)
        weight = torch.exp(prox - old).clamp(max=c.behaviour_weight_cap)
        per_token = torch.where(mask, weight * core, 0.0)
        if loss_type == "grpo":
            loss = loss + (per_token.sum(-1) / m.sum(-1)).sum() / total_rows
        elif loss_type in ("dapo", "bnpo"):
            loss = loss + per_token.sum() / total_tokens
        else:  # dr_grpo
            loss = loss + per_token.sum() / (total_rows * CAP)
    return loss


@pytest.mark.parametrize(
    "kind, loss_type, stale, chunk",
    [
        ("grpo", "dapo", False, None),
        ("grpo", "grpo", False, None),
        ("grpo", "bnpo", False, None),
        ("grpo", "dr_grpo", False, None),
        ("rloo", "grpo", False, None),
        ("reinforce-pp", "dr_grpo", False, None),
        ("grpo", "grpo", True, None),
        ("rloo", "dapo", True, 24),
        ("grpo", "dr_grpo", True, 24),
    ],
)
def test_every_critic_free_trainers_sequence_loss_matches_trls_definition(
    kind, loss_type, stale, chunk, tiny_path
):
    settings = {"importance_sampling_level": "sequence", "loss_type": loss_type}
    if chunk is not None:
        settings["max_chunk_tokens"] = chunk
    if kind != "grpo":
        settings["level"] = "token"
    trainer = build(kind, tiny_path, behaviour_weight_cap=1.3, **settings)
    step = trainer.policy_gradient()
    assert step.objective.importance_sampling_level == "sequence"
    batch = trainer.rollout_batch(trainer.collect())
    g = torch.Generator().manual_seed(5)
    mask = batch.action_mask
    current = step.current_log_probs(batch)
    # A policy away from the rollout's, so ratios leave the clip range on both sides.
    old = torch.where(mask, current + 0.25 * torch.randn(mask.shape, generator=g), 0.0)
    adv = torch.randn(len(batch), generator=g)
    proximal = None
    if stale:  # behaviour policy further back; the proximal one is `old`
        proximal = old
        old = torch.where(mask, proximal + 0.3 * torch.randn(mask.shape, generator=g), 0.0)
        batch = replace(batch, old_log_probs=old, proximal_log_probs=proximal)
    else:
        batch = replace(batch, old_log_probs=old)
    batch = batch.with_targets(advantages=adv)
    if chunk is not None:  # the bound splits the batch
        assert len(batch.split_rows(batch.indices_of(batch.agents[0]), 1, chunk)) > 1

    trainer.zero_grad()
    got = step.backward(batch)
    got_grads = _gradients(trainer)
    trainer.zero_grad()
    want = _independent_loss(trainer, batch, adv, loss_type, proximal)
    want.backward()
    want_grads = _gradients(trainer)
    assert got["loss"] == pytest.approx(float(want.detach()), rel=1e-5, abs=1e-7)
    assert got_grads.keys() == want_grads.keys() and got_grads
    for key, grad in got_grads.items():
        torch.testing.assert_close(grad, want_grads[key], rtol=1e-5, atol=1e-7)
    # Not the token-level loss: the option changes the objective.
    token = replace(step.objective, importance_sampling_level="token")
    trainer.zero_grad()
    assert type(step)(trainer.policy, token, sampling=step.sampling).backward(batch)[
        "loss"
    ] != pytest.approx(got["loss"], rel=1e-4)


def test_sequence_ratios_are_refused_at_action_level(tiny_path):
    with pytest.raises(ValueError, match=r"importance_sampling_level='sequence'.*level='action'"):
        build("rloo", tiny_path, level="action", importance_sampling_level="sequence")
    with pytest.raises(ValueError, match="importance_sampling_level must be"):
        build("grpo", tiny_path, importance_sampling_level="seq")
