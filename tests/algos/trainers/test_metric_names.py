"""Every metric any trainer logs is in the metrics table (marft_algos.runs.metrics.METRICS), and
the statistics the two update loops share mean the same in both."""

from __future__ import annotations

import json
import math

import pytest
import torch
from test_trainers import build

from marft_algos.distributed import DistributedContext
from marft_algos.runs.metrics import is_documented
from marft_algos.trainers.stats import UpdateStats, advantage_abs_mean

#: One tiny iteration of each algorithm, with the options that add metrics of their own.
RUNS = {
    "action-marft": ("action", {"trust_region_kl": 10.0, "eval_sampled": True}),
    "token-marft": ("token", {"entropy_blowup_factor": 2.0, "rollback_on_blowup": True}),
    "ppo": ("ppo-token", {"team": 1}),
    "grpo": ("grpo", {"beta": 0.04, "dynamic_sampling": True}),
    "rloo": ("rloo", {"level": "token"}),
    "reinforce-pp": ("reinforce-pp", {}),
}


@pytest.mark.parametrize("algo", list(RUNS))
def test_every_logged_metric_is_in_the_table(algo, tiny_path, tmp_path):
    kind, options = RUNS[algo]
    trainer = build(kind, tiny_path, iterations=1, output_dir=str(tmp_path), **options)
    trainer.train()
    trainer.close()
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    names = {name for record in records for name in record}
    assert {"train/policy_loss", "train/approx_kl", "eval/accuracy"} <= names
    undocumented = sorted(name for name in names if not is_documented(name))
    assert not undocumented, f"{algo} logs metrics missing from METRICS: {undocumented}"


def test_step_statistics_mean_the_same_in_every_loop():
    stats = UpdateStats(["b", "a"])
    for kl, loss in ((0.0, 1.0), (0.5, 3.0)):
        stats.add_step(
            {"approx_kl": kl, "clip_fraction": kl, "policy_loss": loss, "kl": 9.0, "grad_norm": 2.0}
        )
    metrics = stats.metrics()
    assert metrics["train/approx_kl"] == 0.0 and metrics["train/clip_fraction"] == 0.0  # first step
    assert metrics["train/approx_kl_last"] == 0.5  # last step
    assert metrics["train/policy_loss"] == 2.0 and metrics["train/grad_norm"] == 2.0  # means
    assert "train/kl" not in metrics  # only with a KL term in the objective
    assert metrics["train/skipped_empty"] == 0 and metrics["train/agents"] == "a,b"


def test_an_update_without_a_policy_step_reports_no_step_statistics():
    stats = UpdateStats(["a"])
    stats.add_value_loss(0.25)
    metrics = stats.metrics()
    assert metrics["train/skipped_empty"] == 1 and metrics["train/value_loss"] == 0.25
    for name in ("policy_loss", "entropy", "approx_kl", "clip_fraction", "approx_kl_last"):
        assert (
            f"train/{name}" not in metrics
        )  # not measured, rather than NaN in one loop, 0 in another


def test_advantage_abs_mean_is_over_the_trained_entries():
    one = DistributedContext()
    mask = torch.tensor([[True, True, True], [True, False, False]])
    # One advantage per decision at token level counts once per token: (3·1 + 1·3) / 4.
    per_decision = advantage_abs_mean(torch.tensor([1.0, -3.0]), mask, one)
    assert per_decision["train/advantage_abs_mean"] == pytest.approx(1.5)
    per_token = advantage_abs_mean(torch.tensor([[1.0, -1.0, 1.0], [-3.0, 7.0, 7.0]]), mask, one)
    assert per_token == per_decision
    action = advantage_abs_mean(torch.tensor([1.0, -3.0]), torch.tensor([True, True]), one)
    assert action["train/advantage_abs_mean"] == 2.0
    assert advantage_abs_mean(torch.tensor([1.0]), torch.tensor([False]), one) == {}
    assert math.isfinite(per_token["train/advantage_abs_mean"])
