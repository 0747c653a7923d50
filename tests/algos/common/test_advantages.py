"""Advantage estimators against hand-computed values and independent implementations."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from marft_algos.common import (
    action_level_gae,
    discounted_returns,
    flatten_action_tokens,
    group_advantages,
    kl_penalized_returns,
    kl_penalty,
    leave_one_out_advantages,
    normalize_advantages,
    token_level_gae,
    zero_std_group_mask,
)

GAMMA, LAM = 0.9, 0.8  # γλ = 0.72 in the hand computations below


def t(*xs: float) -> torch.Tensor:
    return torch.tensor(xs, dtype=torch.float32)


def b(*xs: int) -> torch.Tensor:
    return torch.tensor(xs, dtype=torch.bool)


# ---------------------------------------------------------------- action level: hand-computed


# 2 agents x 2 rounds: decisions (t0,a1) (t0,a2) (t1,a1) (t1,a2).
V4 = t(0.1, 0.2, 0.3, 0.4)
R4 = t(0.0, 1.0, 0.0, 2.0)
END4 = b(0, 1, 0, 1)


def test_two_agents_two_rounds_hand() -> None:
    adv, ret = action_level_gae(R4, V4, END4, b(0, 0, 0, 0), t(0.5), gamma=GAMMA, lam=LAM)
    # k=3 (last agent, round 1): δ = 2 + 0.9*0.5 - 0.4 = 2.05; A = 2.05
    # k=2 (agent 1, round 1):    δ = 0 + 0.9*0.4 - 0.3 = 0.06; A = 0.06 + 0.72*2.05 = 1.536
    # k=1 (last agent, round 0): δ = 1 + 0.9*0.3 - 0.2 = 1.07; A = 1.07 + 0.72*1.536 = 2.17592
    # k=0 (agent 1, round 0):    δ = 0 + 0.9*0.2 - 0.1 = 0.08; A = 0.08 + 0.72*2.17592 = 1.6466624
    expected = t(1.6466624, 2.17592, 1.536, 2.05)
    torch.testing.assert_close(adv, expected)
    torch.testing.assert_close(ret, expected + V4)


def test_done_in_the_middle_hand() -> None:
    adv, _ = action_level_gae(R4, V4, END4, b(0, 1, 0, 0), t(0.5), gamma=GAMMA, lam=LAM)
    # k=3, k=2 as above: 2.05, 1.536
    # k=1: episode ends after round 0, no bootstrap and no trace: δ = 1 - 0.2 = 0.8; A = 0.8
    # k=0: δ = 0.9*0.2 - 0.1 = 0.08; A = 0.08 + 0.72*0.8 = 0.656
    torch.testing.assert_close(adv, t(0.656, 0.8, 1.536, 2.05))


def test_done_flag_on_every_agent_of_the_round_is_read_only_at_round_end() -> None:
    adv_a, _ = action_level_gae(R4, V4, END4, b(0, 1, 0, 0), t(0.5), gamma=GAMMA, lam=LAM)
    adv_b, _ = action_level_gae(R4, V4, END4, b(1, 1, 0, 0), t(0.5), gamma=GAMMA, lam=LAM)
    torch.testing.assert_close(adv_a, adv_b)


def test_no_intra_round_discount_hand() -> None:
    adv, _ = action_level_gae(
        R4, V4, END4, b(0, 0, 0, 0), t(0.5), gamma=GAMMA, lam=LAM, intra_round_discount=False
    )
    # k=3: 2.05 (round edge keeps γ, λ)
    # k=2: γ = λ = 1 inside the round: δ = 0.4 - 0.3 = 0.1; A = 0.1 + 2.05 = 2.15
    # k=1: δ = 1 + 0.9*0.3 - 0.2 = 1.07; A = 1.07 + 0.72*2.15 = 2.618
    # k=0: δ = 0.2 - 0.1 = 0.1; A = 0.1 + 2.618 = 2.718
    torch.testing.assert_close(adv, t(2.718, 2.618, 2.15, 2.05))


def test_rounds_with_different_numbers_of_agents_hand() -> None:
    # Round 0: three agents; round 1: a router schedules one agent, then the episode ends.
    adv, _ = action_level_gae(
        t(0, 0, 1, 1), V4, b(0, 0, 1, 1), b(0, 0, 0, 1), t(9.0), gamma=GAMMA, lam=LAM
    )
    # k=3: done, bootstrap 9 ignored: δ = 1 - 0.4 = 0.6; A = 0.6
    # k=2: δ = 1 + 0.9*0.4 - 0.3 = 1.06; A = 1.06 + 0.72*0.6 = 1.492
    # k=1: δ = 0 + 0.9*0.3 - 0.2 = 0.07; A = 0.07 + 0.72*1.492 = 1.14424
    # k=0: δ = 0 + 0.9*0.2 - 0.1 = 0.08; A = 0.08 + 0.72*1.14424 = 0.9038528
    torch.testing.assert_close(adv, t(0.9038528, 1.14424, 1.492, 0.6))


def test_padding_batch_hand() -> None:
    # env 0: the 3+1 agents case above; env 1: one round of two agents, then padding (garbage).
    rewards = torch.stack([t(0, 0, 1, 1), t(0, 1, 7, 7)])  # (B=2, T=4)
    values = torch.stack([V4, t(0.5, 0.5, 100, 100)])
    round_end = torch.stack([b(0, 0, 1, 1), b(0, 1, 1, 0)])
    dones = torch.stack([b(0, 0, 0, 1), b(0, 1, 0, 0)])
    valid = torch.stack([b(1, 1, 1, 1), b(1, 1, 0, 0)])
    adv, ret = action_level_gae(
        rewards, values, round_end, dones, t(9.0, 9.0), gamma=GAMMA, lam=LAM, valid=valid
    )
    # env 1, k=1: δ = 1 - 0.5 = 0.5 (done); k=0: δ = 0.9*0.5 - 0.5 = -0.05; A = -0.05 + 0.72*0.5 = 0.31
    torch.testing.assert_close(adv[0], t(0.9038528, 1.14424, 1.492, 0.6))
    torch.testing.assert_close(adv[1], t(0.31, 0.5, 0.0, 0.0))
    torch.testing.assert_close(ret[1], t(0.81, 1.0, 0.0, 0.0))


def test_padding_in_the_middle_is_transparent() -> None:
    ref, _ = action_level_gae(R4, V4, END4, b(0, 0, 0, 0), t(0.5), gamma=GAMMA, lam=LAM)
    # Same decisions with pad slots between them (garbage rewards/values/markers on the pads).
    adv, ret = action_level_gae(
        t(0, 5, 1, 0, 5, 2),
        t(0.1, 50, 0.2, 0.3, 50, 0.4),
        b(0, 1, 1, 0, 1, 1),
        b(0, 1, 0, 0, 1, 0),
        t(0.5),
        gamma=GAMMA,
        lam=LAM,
        valid=b(1, 0, 1, 1, 0, 1),
    )
    torch.testing.assert_close(adv[[0, 2, 3, 5]], ref)
    assert adv[1] == 0 and adv[4] == 0 and ret[1] == 0 and ret[4] == 0


def test_truncated_mid_round_bootstraps_from_next_agent() -> None:
    # The rollout stops after agent 1 of a round: bootstrap is V of agent 2 (intra-round edge).
    adv, _ = action_level_gae(t(0.0), t(0.1), b(0), b(1), t(0.5), gamma=GAMMA, lam=LAM)
    # done is ignored (not a round end): δ = 0 + 0.9*0.5 - 0.1 = 0.35
    torch.testing.assert_close(adv, t(0.35))


def test_discounted_returns_hand() -> None:
    g = discounted_returns(R4, END4, b(0, 1, 0, 0), t(10.0), gamma=0.5)
    # k=3: 2 + 0.5*10 = 7; k=2: 0 + 0.5*7 = 3.5; k=1: 1 (done); k=0: 0 + 0.5*1 = 0.5
    torch.testing.assert_close(g, t(0.5, 1.0, 3.5, 7.0))


def test_shape_errors_are_explained() -> None:
    with pytest.raises(ValueError, match="values has shape"):
        action_level_gae(R4, t(1, 2), END4, END4, gamma=GAMMA, lam=LAM)
    with pytest.raises(ValueError, match="one entry per env"):
        action_level_gae(
            R4[None].repeat(2, 1),
            V4[None].repeat(2, 1),
            END4[None].repeat(2, 1),
            END4[None].repeat(2, 1),
            t(1, 2, 3),
            gamma=GAMMA,
            lam=LAM,
        )


# ---------------------------------------------------------------- action level: independent


def test_single_agent_matches_stable_baselines3() -> None:
    from gymnasium import spaces
    from stable_baselines3.common.buffers import RolloutBuffer

    rng = np.random.default_rng(0)
    n_steps, n_envs, gamma, lam = 64, 5, 0.97, 0.9
    buf = RolloutBuffer(
        n_steps, spaces.Box(-1, 1, (1,)), spaces.Discrete(2), "cpu", lam, gamma, n_envs
    )
    buf.reset()
    buf.rewards[:] = rng.normal(size=(n_steps, n_envs))
    buf.values[:] = rng.normal(size=(n_steps, n_envs))
    # SB3 convention: episode_starts[k] = 1 if step k is the first of a new episode, i.e. the
    # previous step ended one. Our done[k] says the episode ended *after* step k.
    buf.episode_starts[:] = rng.random((n_steps, n_envs)) < 0.1
    last_dones = rng.random(n_envs) < 0.5
    last_values = torch.tensor(rng.normal(size=n_envs), dtype=torch.float32)
    buf.compute_returns_and_advantage(last_values, last_dones)

    dones = np.concatenate([buf.episode_starts[1:], last_dones[None]], axis=0).T  # (B, T)
    adv, ret = action_level_gae(
        torch.tensor(buf.rewards.T),
        torch.tensor(buf.values.T),
        torch.ones(n_envs, n_steps, dtype=torch.bool),  # one agent: every decision ends its round
        torch.tensor(dones, dtype=torch.bool),
        last_values,
        gamma=gamma,
        lam=lam,
    )
    assert last_dones.any() and not last_dones.all()
    np.testing.assert_allclose(adv.numpy(), buf.advantages.T, atol=1e-5, rtol=0)
    np.testing.assert_allclose(ret.numpy(), buf.returns.T, atol=1e-5, rtol=0)


def reference_loop_gae(
    rewards: np.ndarray,
    values: np.ndarray,
    dones: np.ndarray,
    next_value: np.ndarray,
    gamma: float,
    lam: float,
    intra_round_discount: bool = True,
) -> np.ndarray:
    """The paper's Appendix A loop, written out with (step, env, agent) arrays.

    values/masks carry one extra step: values[T, :, 0] = next_value and masks[k + 1] = 1 - done[k].
    A round never straddles an episode end, so the mask between agents of one step is 1.
    """
    n_steps, n_envs, n_agents = rewards.shape
    v = np.zeros((n_steps + 1, n_envs, n_agents))
    v[:n_steps] = values
    v[n_steps, :, 0] = next_value
    masks = np.ones((n_steps + 1, n_envs, n_agents))
    masks[1:] = 1.0 - dones[:, :, None]
    g_in, l_in = (gamma, lam) if intra_round_discount else (1.0, 1.0)
    adv = np.zeros_like(rewards)
    gae = np.zeros(n_envs)
    for step in reversed(range(n_steps)):
        for agent in reversed(range(n_agents)):
            if agent == n_agents - 1:
                m = masks[step + 1, :, 0]
                delta = rewards[step, :, agent] + gamma * v[step + 1, :, 0] * m - v[step, :, agent]
                gae = delta + gamma * lam * m * gae
            else:
                delta = rewards[step, :, agent] + g_in * v[step, :, agent + 1] - v[step, :, agent]
                gae = delta + g_in * l_in * gae
            adv[step, :, agent] = gae
    return adv


@pytest.mark.parametrize("intra", [True, False])
def test_multi_agent_matches_reference_loop(intra: bool) -> None:
    rng = np.random.default_rng(1)
    n_steps, n_envs, n_agents, gamma, lam = 12, 4, 3, 0.99, 0.95
    rewards = rng.normal(size=(n_steps, n_envs, n_agents))  # per-agent rewards, all non-zero
    values = rng.normal(size=(n_steps, n_envs, n_agents))
    dones = rng.random((n_steps, n_envs)) < 0.25
    next_value = rng.normal(size=n_envs)
    expected = reference_loop_gae(rewards, values, dones, next_value, gamma, lam, intra)

    flat = lambda x: torch.tensor(x.transpose(1, 0, 2).reshape(n_envs, -1), dtype=torch.float32)  # noqa: E731
    round_end = torch.zeros(n_envs, n_steps, n_agents, dtype=torch.bool)
    round_end[..., -1] = True
    done_flat = torch.tensor(
        dones.T[:, :, None].repeat(n_agents, axis=2)
    )  # done copied to every agent
    adv, ret = action_level_gae(
        flat(rewards),
        flat(values),
        round_end.reshape(n_envs, -1),
        done_flat.reshape(n_envs, -1),
        torch.tensor(next_value, dtype=torch.float32),
        gamma=gamma,
        lam=lam,
        intra_round_discount=intra,
    )
    diff = (adv - flat(expected)).abs().max().item()
    assert diff < 1e-5, diff
    torch.testing.assert_close(ret, adv + flat(values))


# ---------------------------------------------------------------- token level


def test_one_token_per_action_equals_action_level() -> None:
    gen = torch.Generator().manual_seed(2)
    shape = (3, 20)
    rewards, values = torch.randn(shape, generator=gen), torch.randn(shape, generator=gen)
    round_end = torch.rand(shape, generator=gen) < 0.4  # rounds of random length
    dones = torch.rand(shape, generator=gen) < 0.3
    valid = torch.rand(shape, generator=gen) < 0.9
    boot = torch.randn(3, generator=gen)
    for intra in (True, False):
        kw = dict(gamma=0.95, lam=0.9, valid=valid, intra_round_discount=intra)
        a_adv, a_ret = action_level_gae(rewards, values, round_end, dones, boot, **kw)
        t_adv, t_ret = token_level_gae(
            rewards,
            values,
            torch.ones(shape, dtype=torch.bool),
            round_end,
            dones,
            boot,
            gamma_token=0.3,
            **kw,  # never used: every token ends its action
        )
        torch.testing.assert_close(t_adv, a_adv)
        torch.testing.assert_close(t_ret, a_ret)


def test_token_level_zero_values_lambda_one_is_discounted_future_reward() -> None:
    # Round 0: agent A (3 tokens, r=0.5 on its last), agent B (2 tokens, r=1 on its last);
    # round 1: agent A (2 tokens, r=2 on its last), episode ends.
    rewards = t(0, 0, 0.5, 0, 1, 0, 2)
    action_end = b(0, 0, 1, 0, 1, 0, 1)
    round_end = b(0, 0, 0, 0, 1, 0, 1)
    dones = b(0, 0, 0, 0, 0, 0, 1)
    adv, _ = token_level_gae(
        rewards, torch.zeros(7), action_end, round_end, dones, gamma=0.9, lam=1.0, gamma_token=1.0
    )
    # round-1 tokens: 2; agent B tokens: 1 + 0.9*2 = 2.8; agent A tokens: 0.5 + 0.9*2.8 = 3.02
    torch.testing.assert_close(adv, t(3.02, 3.02, 3.02, 2.8, 2.8, 2.0, 2.0))
    torch.testing.assert_close(
        discounted_returns(t(0.5, 1, 2), b(0, 1, 1), b(0, 0, 1), gamma=0.9), t(3.02, 2.8, 2.0)
    )


def test_token_level_hand() -> None:
    # One round, agent A tokens k=0,1 then agent B tokens k=2,3, reward 1 on the last token, done.
    adv, ret = token_level_gae(
        t(0, 0, 0, 1),
        V4,
        b(0, 1, 0, 1),
        b(0, 0, 0, 1),
        b(0, 0, 0, 1),
        gamma=GAMMA,
        lam=LAM,
        gamma_token=0.5,
        lam_token=1.0,
    )
    # k=3: δ = 1 - 0.4 = 0.6; A = 0.6
    # k=2 (inside B: 0.5, 1): δ = 0.5*0.4 - 0.3 = -0.1; A = -0.1 + 0.5*1*0.6 = 0.2
    # k=1 (A → B: 0.9, 0.8):  δ = 0.9*0.3 - 0.2 = 0.07; A = 0.07 + 0.72*0.2 = 0.214
    # k=0 (inside A):          δ = 0.5*0.2 - 0.1 = 0.0;  A = 0.0 + 0.5*1*0.214 = 0.107
    torch.testing.assert_close(adv, t(0.107, 0.214, 0.2, 0.6))
    torch.testing.assert_close(ret, adv + V4)


def test_token_level_default_keeps_reward_over_long_actions() -> None:
    n = 500
    action_end = torch.zeros(n, dtype=torch.bool)
    action_end[-1] = True
    rewards = torch.zeros(n)
    rewards[-1] = 1.0
    adv, _ = token_level_gae(
        rewards, torch.zeros(n), action_end, action_end, action_end, gamma=0.99, lam=1.0
    )
    assert adv[0].item() == pytest.approx(1.0)
    adv99, _ = token_level_gae(
        rewards,
        torch.zeros(n),
        action_end,
        action_end,
        action_end,
        gamma=0.99,
        lam=1.0,
        gamma_token=0.99,
    )
    assert adv99[0].item() == pytest.approx(0.99**499, rel=1e-4)


def test_flatten_action_tokens_hand() -> None:
    # The three actions of the case above stored as a (B=1, T=3, L=4) right-padded token grid.
    token_mask = torch.tensor([[[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 0, 0]]], dtype=torch.bool)
    flat = flatten_action_tokens(token_mask, t(0.5, 1, 2)[None], b(0, 1, 1)[None], b(0, 0, 1)[None])
    assert flat["action_end"].reshape(3, 4).tolist() == [
        [False, False, True, False],
        [False, True, False, False],
        [False, True, False, False],
    ]
    adv, _ = token_level_gae(
        flat["rewards"],
        torch.zeros(1, 12),
        flat["action_end"],
        flat["round_end"],
        flat["dones"],
        gamma=0.9,
        lam=1.0,
        valid=flat["valid"],
    )
    torch.testing.assert_close(
        adv.reshape(3, 4),
        torch.tensor([[3.02, 3.02, 3.02, 0], [2.8, 2.8, 0, 0], [2.0, 2.0, 0, 0]]),
    )
    with pytest.raises(ValueError, match="no generated token"):
        flatten_action_tokens(
            torch.zeros(1, 1, 2, dtype=torch.bool), t(1)[None], b(1)[None], b(1)[None]
        )


def test_token_grid_equals_compact_sequence() -> None:
    gen = torch.Generator().manual_seed(5)
    n_envs, n_dec, width = 3, 6, 5
    lengths = torch.randint(1, width + 1, (n_envs, n_dec), generator=gen)
    token_mask = torch.arange(width) < lengths.unsqueeze(-1)  # (B, T, L)
    rewards = torch.randn(n_envs, n_dec, generator=gen)
    round_end = torch.rand(n_envs, n_dec, generator=gen) < 0.5
    dones = torch.rand(n_envs, n_dec, generator=gen) < 0.5
    values = torch.randn(n_envs, n_dec, width, generator=gen)
    boot = torch.randn(n_envs, generator=gen)
    flat = flatten_action_tokens(token_mask, rewards, round_end, dones)
    kw = dict(gamma=0.95, lam=0.9, gamma_token=0.99, lam_token=0.97)
    adv, _ = token_level_gae(
        flat["rewards"],
        values.reshape(n_envs, -1),
        flat["action_end"],
        flat["round_end"],
        flat["dones"],
        boot,
        valid=flat["valid"],
        **kw,
    )
    for env in range(n_envs):
        # Compact sequence built by hand: each action's real tokens, markers on its last token.
        r, a_end, r_end, d = [], [], [], []
        for k in range(n_dec):
            n = int(lengths[env, k])
            r += [0.0] * (n - 1) + [float(rewards[env, k])]
            a_end += [False] * (n - 1) + [True]
            r_end += [False] * (n - 1) + [bool(round_end[env, k])]
            d += [False] * (n - 1) + [bool(dones[env, k])]
        compact_adv, _ = token_level_gae(
            torch.tensor(r),
            values[env][token_mask[env]],
            torch.tensor(a_end),
            torch.tensor(r_end),
            torch.tensor(d),
            boot[env],
            **kw,
        )
        torch.testing.assert_close(adv[env][flat["valid"][env]], compact_adv)


def test_float64_kept_and_no_grad_through_targets() -> None:
    values = V4.double().requires_grad_()
    adv, ret = action_level_gae(R4.double(), values, END4, b(0, 0, 0, 0), 0.5, gamma=GAMMA, lam=LAM)
    assert adv.dtype == torch.float64 and not adv.requires_grad and not ret.requires_grad


# ---------------------------------------------------------------- group advantages (GRPO)


def test_group_advantages_hand() -> None:
    adv = group_advantages(t(1, 0, 1, 5, 5, 5), torch.tensor([0, 0, 0, 1, 1, 1]))
    # group 0: mean 2/3, deviations (1/3, -2/3, 1/3), unbiased var = (1/9+4/9+1/9)/2 = 1/3
    s = math.sqrt(1 / 3) + 1e-4
    torch.testing.assert_close(adv, t(1 / 3 / s, -2 / 3 / s, 1 / 3 / s, 0, 0, 0))
    assert torch.isfinite(adv).all() and (adv[3:] == 0).all()  # all-equal group: exactly 0


def test_group_advantages_scale_variants_hand() -> None:
    r, g = t(1, 0, 1, 3, 5), torch.tensor([0, 0, 0, 1, 1])
    # means: group 0 -> 2/3, group 1 -> 4
    torch.testing.assert_close(
        group_advantages(r, g, scale_rewards="none"), t(1 / 3, -2 / 3, 1 / 3, -1, 1)
    )
    # batch: mean 2, deviations (-1, -2, -1, 1, 3), unbiased var = (1+4+1+1+9)/4 = 4, std 2
    torch.testing.assert_close(
        group_advantages(r, g, scale_rewards="batch"),
        t(1 / 3, -2 / 3, 1 / 3, -1, 1) / (2 + 1e-4),
    )
    # group 1: deviations (-1, 1), unbiased var = 2, std sqrt(2)
    torch.testing.assert_close(group_advantages(r, g)[3:], t(-1, 1) / (math.sqrt(2) + 1e-4))
    with pytest.raises(ValueError, match="scale_rewards"):
        group_advantages(r, g, scale_rewards="global")  # type: ignore[arg-type]


def test_group_advantages_per_agent_groups() -> None:
    # Two samples of question 7 for each of two agents, interleaved: (q, agent) labels.
    labels = [(7, "reasoner"), (7, "actor"), (7, "reasoner"), (7, "actor")]
    adv = group_advantages(t(1, 10, 0, 30), labels, scale_rewards="none")
    # reasoner group {1, 0}: mean 0.5; actor group {10, 30}: mean 20
    torch.testing.assert_close(adv, t(0.5, -10, -0.5, 10))
    adv = group_advantages(t(1, 10, 0, 30), labels)
    # each two-sample group normalises to ±(d / (|d|*sqrt(2)) ) = ±1/sqrt(2) (up to eps)
    torch.testing.assert_close(adv, t(1, -1, -1, 1) / math.sqrt(2), atol=1e-3, rtol=0)


def test_group_singleton_and_zero_std_mask() -> None:
    adv = group_advantages(t(3.0), torch.tensor([0]))
    assert adv.item() == 0.0
    mask = zero_std_group_mask(t(1, 1, 0, 1, 2, 2), torch.tensor([0, 0, 1, 1, 2, 2]))
    assert mask.tolist() == [True, True, False, False, True, True]


# ---------------------------------------------------------------- RLOO and REINFORCE++


def test_leave_one_out_hand() -> None:
    # group 0: {1, 0, 4}; group 1: {2, 6}; group 2: a single sample.
    adv = leave_one_out_advantages(t(1, 0, 4, 2, 6, 9), torch.tensor([0, 0, 0, 1, 1, 2]))
    # 1 - (0+4)/2 = -1; 0 - (1+4)/2 = -2.5; 4 - (1+0)/2 = 3.5; 2 - 6 = -4; 6 - 2 = 4; alone: 0
    torch.testing.assert_close(adv, t(-1, -2.5, 3.5, -4, 4, 0))
    # K/(K-1)·(R - mean): group 0 mean 5/3, factor 3/2
    torch.testing.assert_close(adv[:3], 1.5 * (t(1, 0, 4) - 5 / 3))


def test_leave_one_out_per_agent_labels() -> None:
    labels = [(3, "reasoner"), (3, "actor"), (3, "reasoner"), (3, "actor"), (3, "reasoner")]
    adv = leave_one_out_advantages(t(1, 10, 2, 30, 6), labels)
    # reasoner {1, 2, 6}: 1-4 = -3, 2-3.5 = -1.5, 6-1.5 = 4.5; actor {10, 30}: -20, 20
    torch.testing.assert_close(adv, t(-3, -20, -1.5, 20, 4.5))
    assert leave_one_out_advantages(torch.zeros(0), []).numel() == 0


def test_kl_penalty_estimators_hand() -> None:
    lp, ref = t(-1.0, -2.0), t(-1.5, -1.0)  # x = lp - ref = (0.5, -1)
    torch.testing.assert_close(kl_penalty(lp, ref, "k1"), t(0.5, -1.0))
    torch.testing.assert_close(kl_penalty(lp, ref, "k2"), t(0.125, 0.5))
    torch.testing.assert_close(
        kl_penalty(lp, ref, "k3"), t(math.exp(-0.5) - 1 + 0.5, math.exp(1) - 1 - 1)
    )
    with pytest.raises(ValueError, match="'k1', 'k2' or 'k3'"):
        kl_penalty(lp, ref, "k5")  # type: ignore[arg-type]


def test_kl_penalized_returns_hand() -> None:
    # Rows 0 and 2 are one agent's two decisions in an episode (sequence "a", R = 1); row 1 is
    # another sequence (R = 2) with one pad token holding garbage.
    kl = torch.tensor([[0.1, 0.2, 0.3], [0.4, 9.0, 9.0], [0.5, -0.2, 9.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0], [1, 1, 0]], dtype=torch.bool)
    out = kl_penalized_returns(t(1, 2, 1), kl, mask, ["a", "b", "a"], beta=0.5)
    # sequence a's tokens: 0.1 0.2 0.3 | 0.5 -0.2; suffix sums 0.9 0.8 0.6 | 0.3 -0.2
    want = torch.tensor(
        [
            [1 - 0.5 * 0.9, 1 - 0.5 * 0.8, 1 - 0.5 * 0.6],
            [2 - 0.5 * 0.4, 0, 0],
            [1 - 0.5 * 0.3, 1 + 0.5 * 0.2, 0],
        ]
    )
    torch.testing.assert_close(out, want)
    # Without sequence labels every row is its own sequence: row 0 no longer sees row 2's KL.
    alone = kl_penalized_returns(t(1, 2, 1), kl, mask, beta=0.5)
    torch.testing.assert_close(alone[0], t(1 - 0.5 * 0.6, 1 - 0.5 * 0.5, 1 - 0.5 * 0.3))
    torch.testing.assert_close(alone[1:], want[1:])
    with pytest.raises(ValueError, match="sequence_ids has 2 entries"):
        kl_penalized_returns(t(1, 2, 1), kl, mask, ["a", "b"], beta=0.5)


# ---------------------------------------------------------------- normalisation


def test_normalize_advantages_masked_hand() -> None:
    out = normalize_advantages(t(1, 2, 3, 100), b(1, 1, 1, 0))
    # mean 2, population std sqrt(2/3)
    s = math.sqrt(2 / 3) + 1e-8
    torch.testing.assert_close(out, t(-1 / s, 0, 1 / s, 0))
    torch.testing.assert_close(normalize_advantages(t(1, 2, 3, math.nan), b(1, 1, 1, 0)), out)


def test_normalize_advantages_ignore_zeros_hand() -> None:
    out = normalize_advantages(t(0, 1, 3), ignore_zeros=True)
    # statistics over {1, 3}: mean 2, population std 1; applied to every entry
    torch.testing.assert_close(out, t(-2, -1, 1))
    assert torch.equal(normalize_advantages(torch.zeros(3), ignore_zeros=True), torch.zeros(3))


def test_unbiased_normalisation_matches_torch_std_plus_trl_eps() -> None:
    # RLOO's normalize_advantages is TRL's: (A − mean) / (A.std() + 1e-4), torch's sample std.
    adv = torch.tensor([0.5, -1.0, 2.0, 0.25, -0.75])
    want = (adv - adv.mean()) / (adv.std() + 1e-4)
    torch.testing.assert_close(normalize_advantages(adv, eps=1e-4, unbiased=True), want)
    assert normalize_advantages(torch.tensor([3.0]), unbiased=True).tolist() == [0.0]
