"""Losses against hand-computed values and torch reference implementations."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch.distributions import Categorical, kl_divergence

from marft_algos.common import (
    action_log_prob,
    aggregate_loss,
    approx_kl,
    entropy_from_logits,
    kl_k3,
    masked_mean,
    ppo_clip_loss,
    value_loss,
)


def t(*xs: float) -> torch.Tensor:
    return torch.tensor(xs, dtype=torch.float32)


# ---------------------------------------------------------------- PPO clipped loss


def test_ratio_one_gives_minus_mean_advantage() -> None:
    adv = t(1.0, -2.0, 0.5, 3.0)
    lp = torch.log(t(0.3, 0.6, 0.1, 0.9)).requires_grad_()
    loss, stats = ppo_clip_loss(lp, lp.detach().clone(), adv)
    torch.testing.assert_close(loss, -adv.mean())
    assert stats["clip_fraction"] == 0 and stats["approx_kl"] == 0 and stats["ratio_mean"] == 1
    loss.backward()
    torch.testing.assert_close(lp.grad, -adv / 4)  # d(-r·A)/d lp = -r·A, r = 1, mean over 4


def test_clipping_each_side_hand() -> None:
    # (A, ratio): (+1, 1.5) clipped high; (+1, 0.5) not; (-1, 0.5) clipped low; (-1, 1.5) not.
    adv = t(1, 1, -1, -1)
    old = torch.zeros(4)
    lp = torch.log(t(1.5, 0.5, 0.5, 1.5)).requires_grad_()
    loss, stats = ppo_clip_loss(lp, old, adv, epsilon=0.2)
    # per entry -min(r·A, clip(r, 0.8, 1.2)·A): -min(1.5, 1.2) = -1.2; -min(0.5, 0.8) = -0.5;
    # -min(-0.5, -0.8) = 0.8; -min(-1.5, -1.2) = 1.5 → mean (−1.2 − 0.5 + 0.8 + 1.5)/4 = 0.15
    torch.testing.assert_close(loss, torch.tensor(0.15))
    assert stats["clip_fraction"] == 0.5
    assert stats["clip_high_fraction"] == 0.25 and stats["clip_low_fraction"] == 0.25
    # approx_kl = mean((r − 1) − ln r) = 2*(0.5 − ln 1.5)/4 + 2*(−0.5 − ln 0.5)/4
    expected_kl = (2 * (0.5 - math.log(1.5)) + 2 * (-0.5 - math.log(0.5))) / 4
    assert stats["approx_kl"].item() == pytest.approx(expected_kl, rel=1e-5)
    assert stats["ratio_mean"].item() == pytest.approx(1.0)
    loss.backward()
    # gradient is zero where the clipped term is active, −r·A/4 elsewhere
    torch.testing.assert_close(lp.grad, t(0.0, -0.5 / 4, 0.0, 1.5 / 4))


def test_clip_higher_asymmetric_hand() -> None:
    adv, old = t(1, -1), torch.zeros(2)
    lp = torch.log(t(1.25, 0.75))
    sym, s_sym = ppo_clip_loss(lp, old, adv, epsilon=0.2)
    asym, s_asym = ppo_clip_loss(lp, old, adv, epsilon=0.2, epsilon_high=0.28)
    # symmetric: -min(1.25, 1.2) = -1.2; -min(-0.75, -0.8) = 0.8 → mean -0.2
    # clip-higher [0.8, 1.28]: -min(1.25, 1.25) = -1.25; 0.8 → mean -0.225
    torch.testing.assert_close(sym, torch.tensor(-0.2))
    torch.testing.assert_close(asym, torch.tensor(-0.225))
    assert s_sym["clip_high_fraction"] == 0.5 and s_asym["clip_high_fraction"] == 0
    assert s_sym["clip_low_fraction"] == s_asym["clip_low_fraction"] == 0.5


ADV2 = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])  # (B=2, L=3)
MASK2 = torch.tensor([[1, 1, 1], [1, 0, 0]], dtype=torch.bool)


@pytest.mark.parametrize(
    ("loss_type", "kwargs", "expected"),
    [
        # ratio 1 → per-token loss −A; valid tokens: row 0 {1, 2, 3}, row 1 {4}
        ("bnpo", {}, -(1 + 2 + 3 + 4) / 4),
        ("grpo", {}, -((1 + 2 + 3) / 3 + 4 / 1) / 2),
        ("dapo", {}, -(1 + 2 + 3 + 4) / 4),
        ("dapo", {"num_items_in_batch": 8}, -(1 + 2 + 3 + 4) / 8),
        ("dr_grpo", {}, -(1 + 2 + 3 + 4) / (2 * 3)),
        ("dr_grpo", {"max_completion_length": 5}, -(1 + 2 + 3 + 4) / (2 * 5)),
    ],
)
def test_loss_type_aggregation_hand(loss_type: str, kwargs: dict, expected: float) -> None:
    lp = torch.zeros(2, 3)
    loss, _ = ppo_clip_loss(lp, lp, ADV2, MASK2, loss_type=loss_type, **kwargs)  # type: ignore[arg-type]
    assert loss.item() == pytest.approx(expected)


def test_sequence_advantage_broadcast_and_action_level_mask() -> None:
    lp = torch.zeros(2, 3)
    loss, _ = ppo_clip_loss(lp, lp, t(1.0, 4.0), MASK2)
    # tokens: row 0 three times A=1, row 1 once A=4 → −(1 + 1 + 1 + 4)/4
    assert loss.item() == pytest.approx(-1.75)
    loss, _ = ppo_clip_loss(
        torch.zeros(3), torch.zeros(3), t(1, 2, 30), torch.tensor([1, 1, 0]).bool()
    )
    assert loss.item() == pytest.approx(-1.5)
    with pytest.raises(ValueError, match="loss_type"):
        ppo_clip_loss(lp, lp, ADV2, loss_type="sum")  # type: ignore[arg-type]


def test_aggregate_loss_is_linear_so_kl_can_be_added_after() -> None:
    gen = torch.Generator().manual_seed(6)
    clip_part, kl_part = torch.randn(4, 5, generator=gen), torch.rand(4, 5, generator=gen)
    mask = torch.rand(4, 5, generator=gen) < 0.7
    for loss_type in ("bnpo", "grpo", "dapo", "dr_grpo"):
        together = aggregate_loss(clip_part + 0.04 * kl_part, mask, loss_type)  # type: ignore[arg-type]
        apart = aggregate_loss(clip_part, mask, loss_type) + 0.04 * aggregate_loss(
            kl_part, mask, loss_type
        )  # type: ignore[arg-type]
        torch.testing.assert_close(together, apart)
    assert aggregate_loss(t(1, 2, 3)).item() == pytest.approx(2.0)


def test_garbage_on_padding_does_not_leak() -> None:
    lp = torch.tensor([[-0.5, -math.inf], [-1.0, math.nan]]).requires_grad_()  # pads hold −inf/NaN
    old = torch.tensor([[-0.5, 0.0], [-1.0, 0.0]])
    mask = torch.tensor([[True, False], [True, False]])
    for loss_type in ("bnpo", "grpo", "dapo", "dr_grpo"):
        loss, stats = ppo_clip_loss(lp, old, t(1.0, 2.0), mask, loss_type=loss_type)  # type: ignore[arg-type]
        assert torch.isfinite(loss) and all(torch.isfinite(v) for v in stats.values())
        (grad,) = torch.autograd.grad(loss, lp)
        assert torch.isfinite(grad).all() and (grad[:, 1] == 0).all()
    assert torch.isfinite(action_log_prob(lp.detach(), mask)).all()


# ---------------------------------------------------------------- value loss


def test_value_loss_mse_huber_hand() -> None:
    values, returns = t(1, 2), t(2, 0)  # errors 1, −2
    assert value_loss(values, values, returns).item() == pytest.approx((0.5 * 1 + 0.5 * 4) / 2)
    # Huber δ=1: 0.5*1² = 0.5; 1*(2 − 0.5) = 1.5 → mean 1.0
    huber = value_loss(values, values, returns, huber_delta=1.0)
    assert huber.item() == pytest.approx(1.0)
    torch.testing.assert_close(huber, F.huber_loss(values, returns, delta=1.0))
    # mask drops the second entry
    assert value_loss(values, values, returns, torch.tensor([True, False])).item() == pytest.approx(
        0.5
    )


def test_value_loss_clipped_hand() -> None:
    values, old, returns = t(1, 2), t(0, 0), t(2, 0)
    # clip 0.5: V_clip = (0.5, 0.5); unclipped ½e²: (0.5, 2.0); clipped ½e²: (½·1.5², ½·0.5²) = (1.125, 0.125)
    # max → (1.125, 2.0), mean 1.5625
    loss = value_loss(values.requires_grad_(), old, returns, clip_range=0.5)
    assert loss.item() == pytest.approx(1.5625)
    loss.backward()
    # entry 0: the clipped branch wins and V − old = 1 > 0.5 is outside the clip → no gradient
    assert values.grad is not None and values.grad[0] == 0 and values.grad[1] != 0


# ---------------------------------------------------------------- entropy, KL, log-probs


def test_entropy_matches_categorical() -> None:
    logits = torch.randn(4, 7, 50, generator=torch.Generator().manual_seed(0)) * 3
    torch.testing.assert_close(entropy_from_logits(logits), Categorical(logits=logits).entropy())


def test_entropy_is_stable() -> None:
    ent = entropy_from_logits(torch.tensor([[0.0, 0.0, -math.inf], [1e4, 1e4, 0.0]]))
    torch.testing.assert_close(ent, torch.full((2,), math.log(2)))


def test_kl_k3_hand_and_properties() -> None:
    # lp = ln 0.5, ref = ln 0.25: d = ln 0.5 → 0.5 − ln 0.5 − 1 = ln 2 − 0.5
    assert kl_k3(torch.log(t(0.5)), torch.log(t(0.25))).item() == pytest.approx(math.log(2) - 0.5)
    gen = torch.Generator().manual_seed(3)
    a, b = torch.randn(1000, generator=gen) * 3, torch.randn(1000, generator=gen) * 3
    assert (kl_k3(a, b) >= 0).all()
    assert torch.equal(kl_k3(a, a), torch.zeros(1000))


def test_kl_k3_expectation_is_exact_kl() -> None:
    # E_{x~p}[k3(x)] = Σ p·(q/p − ln(q/p) − 1) = KL(p‖q): check against torch.distributions.
    gen = torch.Generator().manual_seed(4)
    p = Categorical(logits=torch.randn(5, 11, generator=gen))
    q = Categorical(logits=torch.randn(5, 11, generator=gen))
    expectation = (p.probs * kl_k3(p.logits, q.logits)).sum(-1)
    torch.testing.assert_close(expectation, kl_divergence(p, q))


def test_approx_kl_masked() -> None:
    lp, old = torch.log(t(1.5, 0.5, 7.0)), torch.zeros(3)
    kl = approx_kl(lp, old, torch.tensor([True, True, False]))
    assert kl.item() == pytest.approx(
        ((0.5 - math.log(1.5)) + (-0.5 - math.log(0.5))) / 2, rel=1e-5
    )


def test_action_log_prob_normalisations_hand() -> None:
    lps = torch.tensor(
        [[-1.0, -2.0, -3.0], [-4.0, -5.0, -99.0]]
    )  # (B=2, L=3), last of row 1 is pad
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]], dtype=torch.bool)
    torch.testing.assert_close(action_log_prob(lps, mask), t(-6, -9))
    torch.testing.assert_close(action_log_prob(lps, mask, "token"), t(-6 / 3, -9 / 2))
    torch.testing.assert_close(action_log_prob(lps, mask, "word", torch.tensor([2, 3])), t(-3, -3))
    with pytest.raises(ValueError, match="word_counts"):
        action_log_prob(lps, mask, "word")


def test_masked_mean() -> None:
    x = torch.tensor([[1.0, 2.0], [3.0, 40.0]])
    m = torch.tensor([[True, True], [True, False]])
    assert masked_mean(x, m).item() == pytest.approx(2.0)
    torch.testing.assert_close(masked_mean(x, m, dim=1), t(1.5, 3.0))
    assert masked_mean(x, torch.zeros_like(m)).item() == 0.0  # no NaN on an empty mask


def test_sequence_weights_hand():
    from marft_algos.common.losses import sequence_weights

    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]], dtype=torch.bool)  # lengths 3 and 1
    # One chunk of a batch of 3 sequences and 10 tokens in all.
    token = sequence_weights(mask, "token", total_tokens=10, total_sequences=3)
    torch.testing.assert_close(token, mask.float() / 10)
    seq = sequence_weights(mask, "sequence", total_tokens=10, total_sequences=3)
    torch.testing.assert_close(seq, torch.tensor([[1 / 9, 1 / 9, 1 / 9, 0], [1 / 3, 0, 0, 0]]))
    const = sequence_weights(
        mask, "constant", total_tokens=10, total_sequences=3, caps=torch.tensor([6, 2])
    )
    torch.testing.assert_close(const, torch.tensor([[1 / 18, 1 / 18, 1 / 18, 0], [1 / 6, 0, 0, 0]]))
    with pytest.raises(ValueError, match="needs caps"):
        sequence_weights(mask, "constant", total_tokens=10, total_sequences=3)


@pytest.mark.parametrize(
    ("normalizer", "loss_type"), [("token", "dapo"), ("sequence", "grpo"), ("constant", "dr_grpo")]
)
def test_weighted_surrogate_equals_the_aggregated_loss_for_any_split(normalizer, loss_type):
    from marft_algos.common.losses import clipped_surrogate, sequence_weights

    gen = torch.Generator().manual_seed(0)
    lp = torch.randn(5, 7, generator=gen) * 0.3 - 1.0
    old = lp + torch.randn(5, 7, generator=gen) * 0.2
    adv = torch.randn(5, generator=gen)
    mask = torch.arange(7).expand(5, 7) < torch.tensor([[7], [3], [5], [1], [6]])
    whole, _ = ppo_clip_loss(
        lp,
        old,
        adv,
        mask,
        loss_type=loss_type,
        max_completion_length=7,
        num_items_in_batch=float(mask.sum()),
    )
    tokens, rows = float(mask.sum()), 5.0
    caps = torch.full((5,), 7)
    total = torch.zeros(())
    for part in (slice(0, 2), slice(2, 3), slice(3, 5)):  # any split gives the same sum
        per, _ = clipped_surrogate(lp[part], old[part], adv[part], mask[part])
        w = sequence_weights(
            mask[part], normalizer, total_tokens=tokens, total_sequences=rows, caps=caps[part]
        )
        total = total + (per * w).sum()
    torch.testing.assert_close(total, whole)
