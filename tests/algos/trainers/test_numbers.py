"""Bad numbers caught early (issue 27): non-finite and zero settings refused when the config is
built, non-finite weights undone before the next rollout samples, an unknown device named."""

from __future__ import annotations

import math

import pytest
import torch
from test_trainers import adapter_params, build, unchanged

from marft_algos.distributed import init_distributed, parse_device
from marft_algos.policy import LoraSettings
from marft_algos.trainers.action_marft import ActionMARFTConfig
from marft_algos.trainers.grpo import GRPOConfig
from marft_algos.trainers.ppo import PPOConfig


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("learning_rate", math.inf, r"learning_rate must be a finite number, got inf"),
        ("learning_rate", math.nan, r"learning_rate must be a finite number, got nan"),
        ("adam_eps", 0.0, r"adam_eps must be > 0, got 0.0.*0/0 = NaN"),
        ("adam_eps", math.inf, r"adam_eps must be a finite number"),
        ("max_grad_norm", math.nan, r"max_grad_norm must be a finite number"),
        ("max_grad_norm", 0.0, r"max_grad_norm must be > 0"),
        ("critic_learning_rate", 0.0, r"critic_learning_rate must be > 0"),
        ("entropy_coef", -math.inf, r"entropy_coef must be a finite number"),
        ("temperature", math.nan, r"temperature must be a finite number"),
        ("top_p", math.nan, r"top_p must be a finite number"),
    ],
)
def test_bad_numbers_are_refused_when_the_config_is_built(field, value, message):
    with pytest.raises(ValueError, match=message):
        ActionMARFTConfig(**{field: value})


def test_every_trainer_config_checks_its_own_float_fields():
    with pytest.raises(ValueError, match=r"GRPOConfig.beta must be a finite number"):
        GRPOConfig(beta=math.nan)
    with pytest.raises(ValueError, match=r"PPOConfig.gamma must be a finite number"):
        PPOConfig(gamma=math.nan)


@pytest.mark.parametrize("alpha", [math.nan, math.inf, 0.0, -1.0])
def test_lora_alpha_must_be_finite_and_positive(alpha):
    with pytest.raises(ValueError, match=r"LoRA alpha must be a finite number > 0"):
        LoraSettings(alpha=alpha)


def test_an_unknown_device_is_named():
    with pytest.raises(ValueError, match=r"--device 'tpu9' is not a torch device; use cpu, cuda"):
        parse_device("tpu9")
    with pytest.raises(ValueError, match=r"'tpu9'"):
        init_distributed("tpu9")
    assert parse_device("cpu") == torch.device("cpu")


def test_non_finite_weights_are_undone_before_the_next_rollout(tiny_path):
    trainer = build("action", tiny_path, iterations=2, max_nonfinite_iterations=0)
    before = {a: adapter_params(trainer, a) for a in trainer.agents}
    for optimizer in trainer.optimizers.values():
        for group in optimizer.param_groups:
            group["lr"] = math.inf  # finite gradients, non-finite step: NaN/inf weights
    records = trainer.train()  # sampled twice from the stepped policy: must not crash
    assert [r["iteration"] for r in records] == [0, 1, 2]
    assert all(r["train/skipped_nonfinite"] >= 1 for r in records[1:])
    for agent in trainer.agents:
        after = adapter_params(trainer, agent)
        assert all(torch.isfinite(p).all() for p in after.values())
        assert unchanged(before[agent], after)
