"""The KL terms under top-p / top-k sampling: both sides, the policy and the reference model, are
under the sampling temperature alone (TRL's convention), so the term is finite for every token the
policy can sample and exactly 0 while the policy is the reference (GRPO's loss term, RLOO's and
REINFORCE++'s penalties in the reward), and a GRPO run at T=0.7, top_p=0.9, beta=0.04 keeps
training."""

from __future__ import annotations

import json
import math

import pytest
import torch
from test_trainers import build

from marft_algos.cli.main import main

SAMPLING = {"temperature": 0.7, "top_p": 0.9}


def _drifted_grpo(tiny_path):
    """A GRPO trainer whose adapters moved far from the base model, and a batch it sampled."""
    trainer = build(
        "grpo", tiny_path, beta=0.04, num_generations=2, episodes_per_iteration=8, **SAMPLING
    )
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for agent in trainer.trainable_agents():
            for p in trainer.policy.trainable_parameters(agent):
                p.add_(torch.randn(p.shape, generator=gen) * 0.5)
    episodes = trainer.collect()
    batch = trainer.rollout_batch(episodes)
    adv, _ = trainer.batch_advantages(episodes, batch)
    return trainer, batch.with_targets(advantages=adv)


def _reference(trainer, batch, **sampling):
    out = []
    for agent in dict.fromkeys(batch.agents):
        part = batch[batch.indices_of(agent)]
        lp = trainer.policy.token_log_probs(
            agent, list(part.prompt_ids), part.action_lists(), reference=True, **sampling
        )
        out.append(lp.log_probs[lp.mask])
    return torch.cat(out)


def test_kl_to_the_reference_is_finite_for_tokens_outside_the_references_nucleus(tiny_path):
    trainer, batch = _drifted_grpo(tiny_path)
    # The situation of the audit: the policy sampled tokens the reference's own nucleus cuts.
    assert torch.isinf(_reference(trainer, batch, **SAMPLING)).any()
    result = trainer.policy_gradient().backward(batch)
    assert math.isfinite(result["loss"]) and math.isfinite(result["kl"]) and result["kl"] > 0
    grads = [
        p.grad for a in trainer.trainable_agents() for p in trainer.policy.trainable_parameters(a)
    ]
    assert all(g is None or torch.isfinite(g).all() for g in grads)
    trainer.zero_grad()


def test_reference_term_is_the_reference_model_under_temperature_only(tiny_path):
    trainer, batch = _drifted_grpo(tiny_path)
    step = trainer.policy_gradient()
    result = step.backward(batch)
    trainer.zero_grad()
    # Recompute beta * sum(w * k3) by hand with the policy and the reference under the
    # temperature alone (the weights still count the tokens as the loss does).
    totals = (float(batch.action_mask.sum()), float(len(batch)))
    expected = 0.0
    for agent in dict.fromkeys(batch.agents):
        part = batch[batch.indices_of(agent)]
        with torch.no_grad():
            lp = trainer.policy.token_log_probs(
                agent,
                list(part.prompt_ids),
                part.action_lists(),
                temperature=SAMPLING["temperature"],
            )
            ref = trainer.policy.token_log_probs(
                agent,
                list(part.prompt_ids),
                part.action_lists(),
                reference=True,
                temperature=SAMPLING["temperature"],
            )
        weights = step._weights(part, lp.mask, totals)
        diff = ref.log_probs - lp.log_probs
        k3 = torch.where(lp.mask, diff.exp() - diff - 1, torch.zeros_like(diff))
        expected += float((k3 * weights).sum())
    assert math.isclose(result["kl"], expected, rel_tol=1e-5)


@pytest.mark.parametrize("kind", ["grpo", "rloo", "reinforce-pp"])
@pytest.mark.parametrize(
    "sampling", [{"temperature": 1.0, "top_p": 0.9}, {"temperature": 0.7, "top_k": 5}]
)
def test_kl_term_is_exactly_zero_while_the_policy_is_the_reference(tiny_path, kind, sampling):
    # Fresh adapters (LoRA B = 0): the policy is the reference. A policy side under the cut would
    # pay −log Z_t per token (Z_t the mass the cut keeps), 0.07 nats at T=1, top_p=0.9 on SmolLM2.
    trainer = build(
        kind, tiny_path, beta=0.1, num_generations=2, episodes_per_iteration=8, **sampling
    )
    episodes = trainer.collect()
    batch = trainer.rollout_batch(episodes)
    # The recorded log-probs are of the cut distribution: above the uncut ones somewhere.
    assert (batch.old_log_probs > _uncut(trainer, batch, reference=True) + 1e-3).any()
    if kind == "grpo":
        adv, _ = trainer.batch_advantages(episodes, batch)
        result = trainer.policy_gradient().backward(batch.with_targets(advantages=adv))
        trainer.zero_grad()
        assert result["kl"] == 0.0
    else:
        estimator = "k1" if kind == "rloo" else trainer.config.kl_estimator
        kl, metrics = trainer.reference_kl(batch, estimator)
        assert metrics["train/kl"] == 0.0 and not kl.any()


def _uncut(trainer, batch, reference):
    """``(N, T)`` log-probs under the temperature alone, row by row (0 on padding)."""
    out = torch.zeros_like(batch.old_log_probs)
    for k in range(len(batch)):
        part = batch[[k]]
        lp = trainer.policy.token_log_probs(
            part.agents[0],
            list(part.prompt_ids),
            part.action_lists(),
            reference=reference,
            temperature=trainer.config.temperature,
        )
        out[k, : lp.mask.shape[1]] = torch.where(lp.mask, lp.log_probs, 0.0)[0].detach()
    return out


def test_grpo_with_a_kl_penalty_trains_under_nucleus_sampling_on_the_built_in_team(tmp_path):
    run = tmp_path / "run"
    # The built-in team (math-dual-v7, built-in data, marft-tiny-math, its CPU preset) at the
    # audit's settings: before the fix the KL was inf and updates were skipped by iteration 6.
    main(
        [
            "train",
            "--algo",
            "grpo",
            "--temperature",
            "0.7",
            "--top_p",
            "0.9",
            "--beta",
            "0.04",
            "--iterations",
            "6",
            "--episodes_per_iteration",
            "16",
            "--rollout_threads",
            "16",
            "--eval_episodes",
            "8",
            "--output_dir",
            str(run),
            "--no_plot",
            "--progress",
            "off",
        ]
    )
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in records if "train/policy_loss" in r]
    assert len(trained) == 6
    for r in trained:
        assert r["train/skipped_nonfinite"] == 0, r
        kl = r.get("train/kl", 0.0)
        assert isinstance(kl, float) and math.isfinite(kl), r
    assert any(r.get("train/kl", 0.0) > 0 for r in trained)
