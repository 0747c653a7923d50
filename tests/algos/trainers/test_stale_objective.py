"""The decoupled objective for stale rollouts (docs/maths.md, "Stale rollouts"): a hand
computation at staleness 1 and 2, the exact reduction to today's surrogate on fresh data, and
every trainer's loss with proximal log-probs."""

from __future__ import annotations

import copy
import math
from dataclasses import replace

import pytest
import torch
from test_trainers import build

from marft_algos.common.log_probs import action_log_prob
from marft_algos.common.losses import clipped_surrogate


def _hand_loss(new, prox, behav, adv, *, eps_low, eps_high, cap):
    """ℓ = −min(π_prox/π_behav, cap) · min(r·A, clip(r, 1−ε_low, 1+ε_high)·A), r = π_θ/π_prox."""
    weight = min(math.exp(prox - behav), cap)
    ratio = math.exp(new - prox)
    clipped = min(max(ratio, 1 - eps_low), 1 + eps_high)
    return -weight * min(ratio * adv, clipped * adv)


@pytest.mark.parametrize(
    "staleness, behaviour",
    # The behaviour policy's log-probs: one version back (close to the proximal policy), and two
    # versions back (further away; the first entry's weight e^{1.7} > 5 is truncated at the cap).
    [(1, [-1.05, -2.3, -0.45, -1.6]), (2, [-2.7, -2.9, -0.2, -1.1])],
)
def test_the_decoupled_surrogate_matches_a_hand_computation(staleness, behaviour):
    new = [-0.9, -2.0, -0.6, -1.2]
    prox = [-1.0, -2.2, -0.5, -1.3]
    adv = [1.0, -0.5, 2.0, -1.5]
    eps_low, eps_high, cap = 0.2, 0.28, 5.0
    per_entry, terms = clipped_surrogate(
        torch.tensor([new], dtype=torch.float64),
        torch.tensor([behaviour], dtype=torch.float64),
        torch.tensor([adv], dtype=torch.float64),
        epsilon=eps_low,
        epsilon_high=eps_high,
        proximal_log_probs=torch.tensor([prox], dtype=torch.float64),
        behaviour_weight_cap=cap,
    )
    expected = [
        _hand_loss(n, p, b, a, eps_low=eps_low, eps_high=eps_high, cap=cap)
        for n, p, b, a in zip(new, prox, behaviour, adv, strict=True)
    ]
    torch.testing.assert_close(per_entry[0], torch.tensor(expected, dtype=torch.float64))
    weights = [min(math.exp(p - b), cap) for p, b in zip(prox, behaviour, strict=True)]
    torch.testing.assert_close(
        terms["behaviour_weight"][0], torch.tensor(weights, dtype=torch.float64)
    )
    # The ratio and its statistics are against the proximal policy, not the behaviour one.
    ratios = [math.exp(n - p) for n, p in zip(new, prox, strict=True)]
    torch.testing.assert_close(terms["ratio_mean"][0], torch.tensor(ratios, dtype=torch.float64))
    if staleness == 2:
        assert float(terms["behaviour_weight"][0, 0]) == cap  # truncated


def test_the_gradient_flows_through_the_ratio_only():
    new = torch.tensor([[-0.9, -2.0]], requires_grad=True)
    prox = torch.tensor([[-1.0, -2.2]], requires_grad=True)
    behav = torch.tensor([[-1.2, -2.1]])
    loss, _ = clipped_surrogate(
        new, behav, torch.tensor([[1.0, 1.0]]), epsilon=0.5, proximal_log_probs=prox
    )
    loss.sum().backward()
    assert prox.grad is None and new.grad is not None
    # d/dθ of −w·r·A = −w·r·A (∂ log π_θ): both entries unclipped (r within 1 ± 0.5).
    expected = [-math.exp(-1.0 + 1.2) * math.exp(0.1), -math.exp(-2.2 + 2.1) * math.exp(0.2)]
    torch.testing.assert_close(new.grad[0], torch.tensor(expected))


def test_fresh_data_gives_todays_surrogate_bit_for_bit():
    g = torch.Generator().manual_seed(0)
    new = torch.randn(3, 5, generator=g)
    old = torch.randn(3, 5, generator=g)
    adv = torch.randn(3, generator=g)
    mask = torch.rand(3, 5, generator=g) > 0.3
    plain, _ = clipped_surrogate(new, old, adv, mask, epsilon=0.2, epsilon_high=0.28)
    # The proximal policy equal to the behaviour one: weight exp(0) = 1 exactly.
    same, terms = clipped_surrogate(
        new, old, adv, mask, epsilon=0.2, epsilon_high=0.28, proximal_log_probs=old.clone()
    )
    assert torch.equal(plain, same)
    assert bool((terms["behaviour_weight"] == 1).all())


def test_bad_proximal_inputs_are_refused():
    x = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="proximal_log_probs"):
        clipped_surrogate(x, x, torch.zeros(2), proximal_log_probs=torch.zeros(2, 4))
    with pytest.raises(ValueError, match="behaviour_weight_cap must be > 0"):
        clipped_surrogate(x, x, torch.zeros(2), proximal_log_probs=x, behaviour_weight_cap=0.0)


KINDS = ["action", "token", "ppo-action", "ppo-token", "grpo", "rloo", "reinforce-pp"]


def _gradients(trainer):
    return {
        (a, k): p.grad.detach().clone()
        for a in trainer.trainable_agents()
        for k, p in enumerate(trainer.policy.trainable_parameters(a))
        if p.grad is not None
    }


def _assert_same_step(trainer, step, got_batch, want_batch):
    """The policy step on ``got_batch`` has the loss, clip fraction and gradients of the step on
    ``want_batch`` (float32 round-off)."""
    trainer.zero_grad()
    got = step.backward(got_batch)
    got_grads = _gradients(trainer)
    trainer.zero_grad()
    want = step.backward(want_batch)
    want_grads = _gradients(trainer)
    assert math.isfinite(got["loss"]) and got["loss"] != 0
    assert got["loss"] == pytest.approx(want["loss"], rel=1e-5, abs=1e-7)
    assert got["clip_fraction"] == want["clip_fraction"]
    assert got_grads.keys() == want_grads.keys() and got_grads
    for key, grad in got_grads.items():
        torch.testing.assert_close(grad, want_grads[key], rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("staleness", [1, 2])
@pytest.mark.parametrize("kind", KINDS)
def test_every_trainers_loss_on_stale_decisions(kind, staleness, tiny_path):
    """With a weight w = min(π_prox/π_behav, cap) ≥ 0 per entry, the decoupled loss is today's
    surrogate with π_old := π_prox and advantages w·A: the trainer's step (its level, clip range,
    token weighting, log-prob normalisation) must give that loss and that gradient."""
    overrides = {"behaviour_weight_cap": 1.5}
    if kind in ("action", "ppo-action"):
        overrides["logprob_normalization"] = "token"
    trainer = build(kind, tiny_path, team=1 if kind.startswith("ppo") else 2, **overrides)
    episodes = trainer.collect()
    batch = trainer.rollout_batch(episodes)
    step = trainer.policy_gradient()
    g = torch.Generator().manual_seed(staleness)
    mask = batch.action_mask
    current = step.current_log_probs(batch)
    # The proximal policy: near the current one (ratios on both sides of the clip range); the
    # behaviour policy: `staleness` versions back, further away the staler it is.
    prox = torch.where(mask, current + 0.3 * torch.randn(mask.shape, generator=g), 0.0)
    behav = torch.where(mask, prox + 0.4 * staleness * torch.randn(mask.shape, generator=g), 0.0)
    adv = torch.randn(len(batch), generator=g)
    stale = replace(batch, old_log_probs=behav, proximal_log_probs=prox).with_targets(
        advantages=adv
    )
    cap = trainer.config.behaviour_weight_cap
    if step.objective.level == "action":
        norm, words = step.objective.logprob_normalization, batch.word_counts
        log_w = action_log_prob(prox, mask, norm, words) - action_log_prob(behav, mask, norm, words)
        weighted = torch.exp(log_w).clamp(max=cap) * adv  # (N,)
    else:
        weighted = torch.where(mask, torch.exp(prox - behav).clamp(max=cap), 0.0) * adv[:, None]
    assert float(torch.exp(prox - behav)[mask].max()) > cap  # the cap is exercised
    plain = replace(batch, old_log_probs=prox).with_targets(advantages=weighted)

    _assert_same_step(trainer, step, stale, plain)


@pytest.mark.parametrize("kind", KINDS)
def test_proximal_log_probs_from_the_updates_own_forward_match_a_separate_pass(kind, tiny_path):
    """One optimizer step per agent (the defaults: one pass, one minibatch): the update's forward
    runs on the proximal weights, so stale rows marked ``proximal_from_update`` must give the
    loss and gradient of proximal log-probs from a separate pass; unmarked (fresh) rows keep
    their rollout log-probs as proximal."""
    overrides = {"behaviour_weight_cap": 1.5}
    if kind in ("action", "ppo-action"):
        overrides["logprob_normalization"] = "token"
    trainer = build(kind, tiny_path, team=1 if kind.startswith("ppo") else 2, **overrides)
    assert trainer.single_policy_step()
    episodes = trainer.collect()
    batch = trainer.rollout_batch(episodes)
    step = trainer.policy_gradient()
    g = torch.Generator().manual_seed(7)
    mask = batch.action_mask
    current = step.current_log_probs(batch)  # the separate pass
    behav = torch.where(mask, current + 0.5 * torch.randn(mask.shape, generator=g), 0.0)
    marked = torch.arange(len(batch)) % 3 != 0  # every third row fresh
    adv = torch.randn(len(batch), generator=g)
    separate = replace(
        batch, old_log_probs=behav, proximal_log_probs=torch.where(marked[:, None], current, behav)
    ).with_targets(advantages=adv)
    own = replace(batch, old_log_probs=behav, proximal_from_update=marked).with_targets(
        advantages=adv
    )
    assert float(torch.exp(current - behav)[mask & marked[:, None]].max()) > 1.5  # cap exercised
    _assert_same_step(trainer, step, own, separate)
    # Sliced into minibatches, the mark travels with its rows.
    assert torch.equal(own[[2, 0]].proximal_from_update, marked[[2, 0]])


def test_a_batch_without_proximal_log_probs_trains_as_before(tiny_path):
    trainer = build("grpo", tiny_path)
    episodes = trainer.collect()
    assert trainer.rollout_batch(episodes).proximal_log_probs is None
    decisions = [d for e in episodes for d in e.decisions]
    decisions[0].proximal_log_probs = [x - 0.1 for x in decisions[0].log_probs]
    batch = trainer.rollout_batch(episodes)
    assert batch.proximal_log_probs is not None
    # Fresh rows of a batch with some stale ones: their proximal log-probs are the rollout's.
    torch.testing.assert_close(batch.proximal_log_probs[1:], batch.old_log_probs[1:])
    n = len(decisions[0].action_ids)
    torch.testing.assert_close(
        batch.proximal_log_probs[0, :n], torch.tensor(decisions[0].log_probs) - 0.1
    )


def test_an_update_whose_advantages_are_all_zero_runs_no_forward(tiny_path, caplog):
    trainer = build("grpo", tiny_path, iterations=2, num_iterations=2, num_minibatches=2)
    forwards: list[int] = []
    token_log_probs = trainer.policy.token_log_probs

    def counting(agent, prompt_ids, action_ids, **kwargs):
        forwards.append(len(prompt_ids))
        return token_log_probs(agent, prompt_ids, action_ids, **kwargs)

    collect = trainer.collect_with_stats

    def flat():
        episodes, stats = collect()
        for e in episodes:
            e.team_return = 0.0
        return episodes, stats

    trainer.collect_with_stats = flat
    trainer.policy.token_log_probs = counting
    steps = {k: 0 for k in trainer.optimizers}
    for key, optimizer in trainer.optimizers.items():
        optimizer.register_step_post_hook(
            lambda *_, key=key: steps.__setitem__(key, steps[key] + 1)
        )
    with caplog.at_level("INFO", logger="marft_algos.trainers.critic_free"):
        records = trainer.train()
    assert forwards == []  # no forward at all, with or without gradient
    assert "runs no forward or backward pass" in caplog.text
    # The run's state is that of an update that ran: every optimizer stepped once per minibatch
    # and pass, and each iteration has its metrics row.
    assert steps == {k: 2 * 2 * 2 for k in trainer.optimizers}
    assert [r["iteration"] for r in records] == [0, 1, 2]
    assert all(r["train/skipped_empty"] == 1 for r in records[1:])
    assert trainer.iteration == 2


# ---------------------------------------------------------------- tokens outside π_prox's cut


def test_an_entry_the_proximal_policy_cannot_produce_has_weight_zero():
    """log π_prox = −inf (a stale token outside the proximal policy's top-p cut, so log π_θ is
    −inf too at the update's first step): weight 0, loss and gradient exactly those of the other
    entries, not NaN."""
    inf = math.inf
    new = torch.tensor([[-inf, -0.9, -2.0]], requires_grad=True)
    prox = torch.tensor([[-inf, -1.0, -2.2]])
    behav = torch.tensor([[-3.0, -1.05, -2.3]])
    adv = torch.tensor([1.5])
    per_entry, terms = clipped_surrogate(
        new, behav, adv, epsilon=0.2, proximal_log_probs=prox, behaviour_weight_cap=5.0
    )
    expected = [0.0] + [
        _hand_loss(n, p, b, 1.5, eps_low=0.2, eps_high=0.2, cap=5.0)
        for n, p, b in [(-0.9, -1.0, -1.05), (-2.0, -2.2, -2.3)]
    ]
    torch.testing.assert_close(per_entry[0], torch.tensor(expected))
    assert float(terms["behaviour_weight"][0, 0]) == 0.0
    assert bool(torch.isfinite(terms["approx_kl"]).all())
    per_entry.sum().backward()
    assert new.grad is not None and bool(torch.isfinite(new.grad).all())
    assert float(new.grad[0, 0]) == 0.0 and float(new.grad[0, 1]) != 0.0
    # Sequence-level weights: the whole row's weight is 0.
    per_row, terms = clipped_surrogate(
        new.detach(),
        behav,
        adv,
        proximal_log_probs=prox,
        behaviour_weight_mode="sequence_truncate",
    )
    assert bool((per_row == 0).all()) and bool((terms["behaviour_weight"] == 0).all())


def _outside_the_cut(trainer, step, batch):
    """Replace one action token of the batch by a token outside the current top-p cut: the
    batch and the ``(row, position)`` changed."""
    row, position = 0, 0
    vocab = trainer.policy.tokenizer(batch.agents[row]).vocab_size
    for token in range(vocab - 1, 0, -1):
        ids = batch.action_ids.clone()
        ids[row, position] = token
        candidate = replace(batch, action_ids=ids)
        if math.isinf(float(step.current_log_probs(candidate)[row, position])):
            return candidate, (row, position)
    raise AssertionError("every token is inside the top-p cut")


@pytest.mark.parametrize("kind", KINDS)
def test_a_stale_token_outside_the_proximal_cut_weighs_zero_in_every_trainer(kind, tiny_path):
    """top_p 0.9, one optimizer step (the update's own forward is π_prox): a stale decision's
    token that π_prox cuts has log π_prox = log π_θ = −inf. The step must be finite and equal
    the step where that token (action level: that decision) has advantage 0, not be skipped."""
    overrides = {"top_p": 0.9, "behaviour_weight_cap": 1.5}
    if kind in ("action", "ppo-action"):
        overrides["logprob_normalization"] = "token"
    trainer = build(kind, tiny_path, team=1 if kind.startswith("ppo") else 2, **overrides)
    assert trainer.single_policy_step()
    step = trainer.policy_gradient()
    batch, (row, position) = _outside_the_cut(
        trainer, step, trainer.rollout_batch(trainer.collect())
    )
    mask = batch.action_mask
    current = step.current_log_probs(batch)
    g = torch.Generator().manual_seed(3)
    behav = torch.where(
        mask, current.clamp(min=-30) + 0.3 * torch.randn(mask.shape, generator=g), 0.0
    )
    behav[row, position] = -8.0  # the version that sampled it had the token in its cut
    cut = mask & torch.isinf(current)
    action = step.objective.level == "action"
    if action:
        adv = torch.randn(len(batch), generator=g)
        zeroed = torch.where(cut.any(-1), 0.0, adv)
    else:
        adv = torch.randn(mask.shape, generator=g)
        zeroed = torch.where(cut, 0.0, adv)
    marked = torch.ones(len(batch), dtype=torch.bool)
    got = replace(batch, old_log_probs=behav, proximal_from_update=marked).with_targets(
        advantages=adv
    )
    # The same step where the cut entries have advantage 0 (and a finite proximal log-prob).
    prox = torch.where(cut, behav, current)
    want = replace(batch, old_log_probs=behav, proximal_log_probs=prox).with_targets(
        advantages=zeroed
    )
    _assert_same_step(trainer, step, got, want)


@pytest.mark.parametrize("kind", ["action", "token", "ppo-token"])
def test_the_trust_region_after_one_step_on_stale_rows_is_against_the_proximal_policy(
    kind, tiny_path
):
    """One optimizer step, stale rows whose π_prox is the update's own forward: the KL after the
    step is KL(π_prox ‖ π_stepped), the KL a separate proximal pass measures, not 0; and a cut
    below it undoes the step in both."""
    team = 1 if kind.startswith("ppo") else 2
    episodes = build(kind, tiny_path, team=team).collect()
    batch = build(kind, tiny_path, team=team).rollout_batch(episodes)
    current = build(kind, tiny_path, team=team).policy_gradient().current_log_probs(batch)
    decisions = [d for e in episodes for d in e.decisions]
    assert len(decisions) == len(batch)

    def stale(own_forward):
        copied = copy.deepcopy(episodes)
        for k, d in enumerate(d for e in copied for d in e.decisions):
            n = len(d.action_ids)
            d.log_probs = [x - 0.2 * (j % 3) for j, x in enumerate(d.log_probs)]
            if own_forward:
                d.proximal_from_update = True
            else:
                d.proximal_log_probs = current[k, :n].tolist()
        return copied

    records = {}
    for limit in (10.0, 1e-7):
        for own_forward in (True, False):
            trainer = build(kind, tiny_path, team=team, trust_region_kl=limit)
            assert trainer.single_policy_step()
            trainer.guards.start_update()
            records[limit, own_forward] = trainer.update(stale(own_forward))
    for limit in (10.0, 1e-7):
        own, separate = records[limit, True], records[limit, False]
        assert separate["train/approx_kl_after"] > 1e-7
        assert own["train/approx_kl_after"] == pytest.approx(
            separate["train/approx_kl_after"], rel=1e-4
        )
        undone = int(limit < separate["train/approx_kl_after"])
        assert own["train/skipped_trust_region"] == separate["train/skipped_trust_region"] == undone
