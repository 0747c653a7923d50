"""Correcting the rollout engine's mismatch (``engine_correction``; docs/maths.md, "Engine
mismatch"): the update recomputes the engine's log-probs with the trainer's weights at rollout
time and weights each entry by the bounded ratio trainer/engine (TRL's
``vllm_importance_sampling_correction`` and its four modes), and logs the mismatch."""

from __future__ import annotations

import copy
import math
from dataclasses import replace

import pytest
import torch
from recording import train_recording
from test_stale_objective import _assert_same_step
from test_trainers import build

from marft_algos.common.behaviour_weights import behaviour_weights
from marft_algos.policy import MultiAgentPolicy
from marft_algos.trainers.proximal import correct_engine, corrects_engine


@pytest.mark.parametrize(
    "mode, want",
    [
        # d = prox − behav per token: row 0 (0.5, 1.5), row 1 (−0.2, pad)
        ("token_truncate", [[math.exp(0.5), 3.0], [math.exp(-0.2), 1.0]]),
        ("token_mask", [[math.exp(0.5), 0.0], [math.exp(-0.2), 1.0]]),
        ("sequence_truncate", [[3.0, 3.0], [math.exp(-0.2)] * 2]),
        ("sequence_mask", [[0.0, 0.0], [math.exp(-0.2)] * 2]),
    ],
)
def test_the_four_weight_modes_match_a_hand_computation(mode, want):
    prox = torch.tensor([[-1.0, -0.5], [-2.2, 0.0]], dtype=torch.float64)
    behav = torch.tensor([[-1.5, -2.0], [-2.0, 7.0]], dtype=torch.float64)
    mask = torch.tensor([[True, True], [True, False]])
    got = behaviour_weights(prox, behav, mask, cap=3.0, mode=mode)
    torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64))


def test_auto_corrects_another_engine_or_16_bit_weights_only(tiny_path):
    trainer = build("grpo", tiny_path)
    config, policy = trainer.config, trainer.policy
    assert trainer.engine_correction is False  # float32, the policy samples: same computation
    assert corrects_engine(config, policy, rollout_backend=object())
    assert corrects_engine(replace(config, engine_correction="on"), policy, None)
    assert not corrects_engine(replace(config, engine_correction="off"), policy, object())
    half = MultiAgentPolicy.from_pretrained(
        tiny_path, ["writer", "answerer"], torch_dtype=torch.bfloat16
    )
    assert corrects_engine(config, half, None)
    with pytest.raises(ValueError, match="engine_correction must be"):
        build("grpo", tiny_path, engine_correction="yes")
    with pytest.raises(ValueError, match="behaviour_weight_mode must be one of"):
        build("grpo", tiny_path, behaviour_weight_mode="truncate")


def _engine_episodes(trainer, noise=0.3, seed=4):
    """Episodes whose log-probs are another engine's: the sampler's, perturbed per token."""
    episodes = trainer.collect()
    g = torch.Generator().manual_seed(seed)
    for e in episodes:
        for d in e.decisions:
            shift = noise * torch.randn(len(d.log_probs), generator=g)
            d.log_probs = [x + float(s) for x, s in zip(d.log_probs, shift, strict=True)]
    return episodes


@pytest.mark.parametrize("kind", ["grpo", "action", "token"])
def test_the_update_weights_each_entry_by_the_truncated_ratio_trainer_over_engine(kind, tiny_path):
    trainer = build(kind, tiny_path, engine_correction="on", behaviour_weight_cap=1.2)
    assert trainer.engine_correction
    episodes = _engine_episodes(trainer)
    engine = trainer.rollout_batch(episodes).old_log_probs
    metrics = correct_engine(trainer, episodes)
    batch = trainer.rollout_batch(episodes)
    step = trainer.policy_gradient()
    mask = batch.action_mask
    trainer_lp = step.current_log_probs(batch)
    # The proximal log-probs are the trainer's recomputation, for every decision.
    assert batch.proximal_log_probs is not None and batch.proximal_from_update is None
    torch.testing.assert_close(batch.proximal_log_probs, trainer_lp, rtol=0, atol=1e-5)
    # The mismatch, by hand.
    gap = (trainer_lp - engine).abs()[mask]
    assert metrics["rollout/logprob_mismatch_mean"] == pytest.approx(float(gap.mean()), rel=1e-4)
    assert metrics["rollout/logprob_mismatch_max"] == pytest.approx(float(gap.max()), rel=1e-4)
    assert metrics["rollout/logprob_mismatch_cut"] == 0.0
    for agent in dict.fromkeys(batch.agents):
        rows = torch.tensor(batch.indices_of(agent))
        own = (trainer_lp[rows] - engine[rows]).abs()[mask[rows]]
        key = f"rollout/logprob_mismatch_mean/{agent}"
        assert metrics[key] == pytest.approx(float(own.mean()), rel=1e-4)
    # The step: today's surrogate around the trainer's log-probs, advantages times
    # min(π_trainer/π_engine, cap) (action level: per action).
    g = torch.Generator().manual_seed(1)
    adv = torch.randn(len(batch), generator=g)
    if step.objective.level == "action":
        log_w = (torch.where(mask, trainer_lp - engine, 0.0)).sum(-1)
        weighted = torch.exp(log_w).clamp(max=1.2) * adv
    else:
        weighted = (
            torch.where(mask, torch.exp(trainer_lp - engine).clamp(max=1.2), 0.0) * adv[:, None]
        )
    assert float(torch.exp(trainer_lp - engine)[mask].max()) > 1.2  # the cap acts
    got = batch.with_targets(advantages=adv)
    want = replace(batch, old_log_probs=batch.proximal_log_probs, proximal_log_probs=None)
    _assert_same_step(trainer, step, got, want.with_targets(advantages=weighted))


def test_the_same_computation_shows_no_mismatch_and_an_off_run_logs_none(tiny_path):
    """float32, the policy sampling: the recomputation equals the rollout's log-probs to
    round-off (why ``auto`` leaves the correction off there); an iteration with the correction
    logs the mismatch, one without it does not."""
    on = build("grpo", tiny_path, engine_correction="on", iterations=1)
    record = on.train()[-1]
    assert 0 <= record["rollout/logprob_mismatch_max"] < 1e-4
    assert "rollout/logprob_mismatch_mean/answerer" in record
    off = build("grpo", tiny_path, iterations=1)
    assert not any(k.startswith("rollout/logprob_mismatch") for k in off.train()[-1])


def test_an_engine_run_logs_its_mismatch_and_trains(tiny_path, monkeypatch):
    trainer = build("grpo", tiny_path, engine_correction="on", iterations=1)
    episodes = _engine_episodes(trainer, noise=0.5)
    monkeypatch.setattr(trainer, "collect_with_stats", lambda: (copy.deepcopy(episodes), {}))
    record = trainer.train()[-1]
    assert record["rollout/logprob_mismatch_mean"] > 0.2
    assert record["train/skipped_nonfinite"] == 0


def test_the_options_are_cli_flags_and_config_fields(tmp_path):
    from marft_algos.cli.train import parse_train_args

    flags = ["--algo", "grpo", "--importance-sampling-level", "sequence"]
    flags += ["--engine-correction", "on", "--behaviour-weight-mode", "sequence_mask"]
    _, config_class, values, _ = parse_train_args([*flags, "--behaviour-weight-cap", "3"])
    assert values["importance_sampling_level"] == "sequence"
    assert (
        values["engine_correction"] == "on" and values["behaviour_weight_mode"] == "sequence_mask"
    )
    assert values["behaviour_weight_cap"] == 3.0
    assert config_class.__name__ == "GRPOConfig"
    config = tmp_path / "run.yaml"
    config.write_text("algo: rloo\nlevel: token\nimportance_sampling_level: sequence\n")
    _, _, values, _ = parse_train_args(["--config", str(config)])
    assert values["importance_sampling_level"] == "sequence"


def test_an_async_run_with_the_correction_gives_every_decision_the_trainers_log_probs(tiny_path):
    """max_staleness 1 and the correction: one pass gives every trained decision with a gradient
    its proximal log-probs (none marked for the update's own forward); the mismatch is measured on
    fresh decisions only, so the stale batch logs none."""
    trainer = build("grpo", tiny_path, iterations=2, max_staleness=1, engine_correction="on")
    seen = []
    records = train_recording(
        trainer, lambda episodes: seen.append([d for e in episodes for d in e.decisions])
    )
    assert [r.get("rollout/staleness") for r in records[1:]] == [0.0, 1.0]
    assert records[1]["rollout/logprob_mismatch_max"] < 1e-4  # fresh, float32
    assert "rollout/logprob_mismatch_max" not in records[2]  # every decision stale
    for decisions in seen:
        assert not any(d.proximal_from_update for d in decisions)
        with_prox = [d for d in decisions if d.proximal_log_probs is not None]
        assert with_prox
    gap = max(
        abs(p - b)
        for d in seen[1]
        if d.proximal_log_probs is not None
        for p, b in zip(d.proximal_log_probs, d.log_probs, strict=True)
    )
    assert gap > 1e-4  # stale: the last update moved the weights
