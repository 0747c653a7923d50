"""RLOO and REINFORCE++ learn from the numbers their papers define: advantages recomputed here by
hand (plain Python loops over the episodes, the reference policy called directly), the loss at
the first step (ratio 1), and the settings that must be refused."""

from __future__ import annotations

import math
from collections import defaultdict

import pytest
import torch
from test_trainers import adapter_params, build

from marft_algos.trainers.grpo import GRPOConfig
from marft_algos.trainers.reinforce_pp import REINFORCEPPConfig
from marft_algos.trainers.rloo import RLOOConfig


def _reference_sums(trainer, episodes, estimator="k1"):
    """{(row, agent): [per-token KL of each decision, in order]} from direct policy calls: the
    policy (the weights that sampled) and the reference, both under the temperature alone."""
    out = defaultdict(list)
    for row, episode in enumerate(episodes):
        for d in episode.decisions:
            sides = []
            for reference in (False, True):
                with torch.no_grad():
                    lp = trainer.policy.token_log_probs(
                        d.agent,
                        [d.prompt_ids],
                        [d.action_ids],
                        reference=reference,
                        temperature=trainer.config.temperature,
                    )
                sides.append(lp.log_probs[0, : len(d.action_ids)].tolist())
            kl = []
            for old, r in zip(*sides, strict=True):
                x = old - r
                kl.append({"k1": x, "k2": 0.5 * x * x, "k3": math.exp(-x) - 1 + x}[estimator])
            out[(row, d.agent)].append(kl)
    return out


def _drift(trainer, scale=0.05):
    """Move every adapter off the identity (LoRA B != 0)."""
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for agent in trainer.trainable_agents():
            for p in trainer.policy.trainable_parameters(agent):
                p.add_(torch.randn(p.shape, generator=gen) * scale)


def _collect(trainer):
    episodes = trainer.collect()
    batch = trainer.rollout_batch(episodes)
    adv, metrics = trainer.batch_advantages(episodes, batch)
    return episodes, batch, adv, metrics


@pytest.mark.parametrize("beta", [0.0, 0.3])
@pytest.mark.parametrize("normalize", [False, True])
def test_rloo_advantages_by_hand(tiny_path, beta, normalize):
    trainer = build(
        "rloo",
        tiny_path,
        iterations=1,
        episodes_per_iteration=9,
        rollout_threads=9,
        num_generations=3,
        beta=beta,
        normalize_advantages=normalize,
        temperature=0.8,
        top_k=7,
    )
    if beta:  # adapters moved off the reference, so the penalty is not 0
        _drift(trainer)
    episodes, batch, adv, metrics = _collect(trainer)
    kl = _reference_sums(trainer, episodes)
    # R' of every (episode, agent) sample: team return minus β·Σ KL over the agent's tokens.
    reward = {
        (row, agent): episodes[row].team_return - beta * sum(sum(k) for k in kls)
        for (row, agent), kls in kl.items()
    }
    expected = {}
    for (row, agent), r in reward.items():
        others = [
            reward[(j, agent)]
            for j in range(len(episodes))
            if j != row and episodes[j].group == episodes[row].group
        ]
        assert len(others) == 2  # K − 1
        expected[(row, agent)] = r - sum(others) / len(others)
    if normalize:
        values = list(expected.values())
        mean = sum(values) / len(values)
        # TRL's RLOO: the sample std (n − 1) plus 1e-4.
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
        expected = {k: (v - mean) / (std + 1e-4) for k, v in expected.items()}
    want = torch.tensor(
        [expected[(int(r), a)] for r, a in zip(batch.episode, batch.agents, strict=True)]
    )
    assert adv.shape == (len(batch),)
    torch.testing.assert_close(adv, want, atol=1e-5, rtol=1e-4)
    if beta:
        tokens = [x for kls in kl.values() for k in kls for x in k]
        assert metrics["train/kl"] == pytest.approx(sum(tokens) / len(tokens), abs=1e-6)
        assert max(abs(x) for x in tokens) > 1e-3


@pytest.mark.parametrize(
    "extra",
    [
        {"level": "token"},
        {"level": "token", "kl_estimator": "k2", "normalize_advantages_per_agent": True},
        {"level": "action", "kl_estimator": "k3"},
        {"level": "token", "baseline": "group", "num_generations": 4},
        {"level": "token", "rounds": 2},
        {"level": "action", "rounds": 2},
    ],
)
def test_reinforce_pp_advantages_by_hand(tiny_path, extra):
    trainer = build(
        "reinforce-pp",
        tiny_path,
        iterations=1,
        episodes_per_iteration=8,
        rollout_threads=8,
        beta=0.5,
        temperature=1.2,
        top_p=0.8,
        **extra,
    )
    rounds = extra.get("rounds", 1)
    # One update first, so the adapters differ from the reference and KL(t) is not ~0.
    trainer.train()
    episodes, batch, adv, _ = _collect(trainer)
    estimator = extra.get("kl_estimator", "k1")
    kl = _reference_sums(trainer, episodes, estimator)
    assert all(len(kls) == rounds for kls in kl.values())  # every agent acts in every round
    assert max(abs(x) for kls in kl.values() for k in kls for x in k) > 1e-4
    reward = {key: episodes[key[0]].team_return for key in kl}
    if extra.get("baseline") == "group":
        means = defaultdict(list)
        for (row, agent), r in reward.items():
            means[(episodes[row].group, agent)].append(r)
        reward = {
            (row, agent): r - sum(means[(episodes[row].group, agent)]) / 4
            for (row, agent), r in reward.items()
        }
    # A_t = R − β·Σ_{i ≥ t} KL(i) over the agent's tokens in the episode, decision after decision.
    returns = {}
    for key, kls in kl.items():
        flat = [x for k in kls for x in k]
        suffix = [sum(flat[i:]) for i in range(len(flat))]
        start = 0
        for n, k in enumerate(kls):
            returns[(*key, n)] = [reward[key] - 0.5 * s for s in suffix[start : start + len(k)]]
            start += len(k)
    rows = []
    seen = defaultdict(int)
    for r, a in zip(batch.episode, batch.agents, strict=True):
        n = seen[(int(r), a)]
        seen[(int(r), a)] += 1
        rows.append(returns[(int(r), a, n)])
    if extra["level"] == "action":
        rows = [[row[0]] for row in rows]  # the return at the decision's first token

    def standardise(values):
        mean = sum(values) / len(values)
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
        return [(v - mean) / (std + 1e-8) for v in values]

    if extra.get("normalize_advantages_per_agent"):
        want_rows = [None] * len(rows)
        for agent in ("writer", "answerer"):
            idx = [k for k, a in enumerate(batch.agents) if a == agent]
            flat = standardise([x for k in idx for x in rows[k]])
            for k in idx:
                want_rows[k], flat = flat[: len(rows[k])], flat[len(rows[k]) :]
    else:
        flat = standardise([x for row in rows for x in row])
        want_rows = []
        for row in rows:
            want_rows.append(flat[: len(row)])
            flat = flat[len(row) :]
    if extra["level"] == "action":
        torch.testing.assert_close(adv, torch.tensor([r[0] for r in want_rows]), atol=1e-4, rtol=0)
    else:
        for k, want in enumerate(want_rows):
            got = adv[k, : len(want)]
            torch.testing.assert_close(got, torch.tensor(want), atol=1e-4, rtol=0)
            assert (adv[k, len(want) :] == 0).all()


@pytest.mark.parametrize(
    ("kind", "extra"),
    [
        ("rloo", {"level": "action"}),
        ("rloo", {"level": "token", "loss_type": "dapo"}),
        ("rloo", {"level": "token", "loss_type": "grpo"}),
        ("reinforce-pp", {"level": "token"}),
        ("reinforce-pp", {"level": "action"}),
    ],
)
def test_first_step_loss_is_minus_the_weighted_advantage(tiny_path, kind, extra):
    # Ratio 1 before any step: each entry's clipped surrogate is −A, weighted as the level says.
    trainer = build(kind, tiny_path, iterations=1, entropy_coef=0.0, **extra)
    episodes = trainer.collect()
    batch = trainer.rollout_batch(episodes)
    adv, _ = trainer.batch_advantages(episodes, batch)
    # Leave-one-out advantages sum to 0 in every group: shift each row so the weighting shows.
    adv = adv + (torch.arange(len(batch)) / 10).reshape(-1, *[1] * (adv.dim() - 1))
    result = trainer.policy_gradient().backward(batch.with_targets(advantages=adv))
    trainer.zero_grad()
    lengths = batch.lengths.tolist()
    if extra["level"] == "action":
        want = -sum(adv.tolist()) / len(batch)
    else:
        per_token = (
            adv if adv.dim() == 2 else adv.unsqueeze(-1).expand(-1, batch.action_mask.shape[1])
        )
        sums = [float(per_token[k, :n].sum()) for k, n in enumerate(lengths)]
        if extra.get("loss_type") == "grpo":
            want = -sum(s / n for s, n in zip(sums, lengths, strict=True)) / len(batch)
        else:
            want = -sum(sums) / sum(lengths)
    assert result["policy_loss"] == pytest.approx(want, rel=1e-5, abs=1e-7)
    assert result["approx_kl"] < 1e-10 and result["ratio_mean"] == pytest.approx(1.0, abs=1e-5)


def test_reinforce_pp_with_one_sample_per_task_trains_every_agent(tiny_path):
    trainer = build("reinforce-pp", tiny_path, iterations=2, num_generations=1)
    before = [p.detach().clone() for p in trainer.policy.trainable_parameters("writer")]
    records = trainer.train()
    assert "rollout/zero_std_fraction" not in records[-1]  # no groups to compare within
    after = trainer.policy.trainable_parameters("writer")
    assert any(not torch.equal(a, b) for a, b in zip(before, after, strict=True))


def test_critic_free_configs_refuse_settings_they_would_ignore():
    with pytest.raises(ValueError, match=r"logprob_normalization='token'.*set level='action'"):
        RLOOConfig(level="token", logprob_normalization="token")
    with pytest.raises(ValueError, match=r"loss_type='grpo' weights tokens.*set level='token'"):
        RLOOConfig(level="action", loss_type="grpo")
    with pytest.raises(ValueError, match="num_generations must be >= 2"):
        RLOOConfig(num_generations=1, episodes_per_iteration=4)
    with pytest.raises(ValueError, match=r"baseline='group'.*num_generations >= 2"):
        REINFORCEPPConfig(baseline="group", num_generations=1)
    with pytest.raises(ValueError, match=r"dynamic_sampling.*num_generations >= 2"):
        REINFORCEPPConfig(dynamic_sampling=True, num_generations=1)
    with pytest.raises(ValueError, match="kl_estimator must be"):
        REINFORCEPPConfig(kl_estimator="k4")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="level must be 'action' or 'token'"):
        REINFORCEPPConfig(level="episode")  # type: ignore[arg-type]
    assert (RLOOConfig().num_generations, RLOOConfig().beta, RLOOConfig().level) == (
        2,
        0.05,
        "action",
    )
    assert (REINFORCEPPConfig().num_generations, REINFORCEPPConfig().beta) == (1, 0.01)


@pytest.mark.parametrize("config_cls", [RLOOConfig, REINFORCEPPConfig, GRPOConfig])
def test_negative_entropy_coef_is_refused(config_cls):
    # Skipping zero-advantage rows is exact only for a bonus >= 0; a negative weight used to be
    # accepted and then lose its term on the skipped rows.
    with pytest.raises(
        ValueError, match=r"entropy_coef must be >= 0.*got -0\.01; set entropy_coef=0"
    ):
        config_cls(entropy_coef=-0.01)
    assert config_cls(entropy_coef=0.01).entropy_coef == 0.01


@pytest.mark.parametrize("kind", ["rloo", "grpo"])
def test_skipping_zero_advantages_changes_no_weight(tiny_path, kind):
    # An agent with no non-zero advantage in a minibatch still takes its (zero-gradient) Adam
    # step, whose momentum moves the weights: skipping saves the forward and backward only.
    def run(skip):
        trainer = build(
            kind,
            tiny_path,
            iterations=3,
            episodes_per_iteration=16,
            rollout_threads=16,
            num_generations=2,
            beta=0.0,
            num_minibatches=8,  # two episodes each: often one tied group, all advantages 0
            learning_rate=1e-3,
            skip_zero_advantages=skip,
            binary=True,  # ties: whole groups, and so agents of minibatches, with advantage 0
        )
        trainer.train()
        return {a: adapter_params(trainer, a) for a in ("writer", "answerer")}

    skipped, full = run(True), run(False)
    for agent in skipped:
        assert skipped[agent].keys() == full[agent].keys()
        for name, a in skipped[agent].items():
            torch.testing.assert_close(a, full[agent][name], atol=1e-7, rtol=0)
