"""benchmarks/comparison/run_comparison.py runs end to end on a tiny budget (slow: a few minutes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "comparison" / "run_comparison.py"


@pytest.mark.slow
def test_comparison_runs_and_summarises(tmp_path: Path) -> None:
    from marft_algos.policy import tiny_model_path

    settings = [
        "single-untuned",
        "single-ppo-action",
        "dual-untuned",
        "dual-action-marft",
        "dual-action-marft-agent-norm",
        "dual-grpo",
        "dual-rloo",
        "dual-reinforce-pp",
    ]
    command = [
        sys.executable,
        str(SCRIPT),
        "--model",
        str(tiny_model_path()),
        "--iterations",
        "2",
        "--seeds",
        "0",
        "1",
        "--episodes-per-iteration",
        "4",
        "--max-new-tokens",
        "6",
        "--actor-max-new-tokens",
        "4",
        "--eval-episodes",
        "4",
        "--eval-every",
        "1",
        "--output-dir",
        str(tmp_path / "runs"),
        "--settings",
        *settings,
    ]
    # The checkout under test first (a script's own folder, not the repository root, starts sys.path).
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path}
    result = subprocess.run(command, capture_output=True, text=True, timeout=900, cwd=ROOT, env=env)
    assert result.returncode == 0, result.stderr[-3000:]

    summary = json.loads((tmp_path / "summary.json").read_text())
    assert set(summary["rows"]) == set(settings)
    assert summary["budget"]["episodes_per_run"] == 8
    for name in (
        "single-ppo-action",
        "dual-action-marft",
        "dual-action-marft-agent-norm",
        "dual-grpo",
        "dual-rloo",
        "dual-reinforce-pp",
    ):
        row = summary["rows"][name]
        assert row["seeds"] == [0, 1] and len(row["values"]) == 2
        assert 0.0 <= row["accuracy_mean"] <= 1.0
    # Every team row (untuned too) carries the noise-reasoner check; single-agent rows cannot.
    for name in ("dual-action-marft", "dual-grpo"):
        assert len(summary["rows"][name]["noise_reasoner_values"]) == 2
    # The untuned row: one check per trained team run (5 team settings x 2 seeds).
    assert len(summary["rows"]["dual-untuned"]["noise_reasoner_values"]) == 10
    assert "noise_reasoner_values" not in summary["rows"]["single-ppo-action"]
    assert "dual-untuned > single-untuned" in summary["goal_checks"]
    assert (
        "dual-action-marft > single-ppo-action by more than the seed spread"
        in summary["goal_checks"]
    )
    # Untuned rows are the trained runs' iteration-0 evaluations: a fresh adapter is the base model.
    assert len(summary["rows"]["dual-untuned"]["distinct_values"]) == 1
    assert (tmp_path / "learning_curves.png").stat().st_size > 0
    metrics = tmp_path / "runs" / "dual-action-marft" / "seed0" / "metrics.jsonl"
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert any("eval/accuracy" in r for r in records)

    # A second call reuses the finished runs instead of training again.
    again = subprocess.run(command, capture_output=True, text=True, timeout=900, cwd=ROOT, env=env)
    assert again.returncode == 0 and "reused dual-action-marft seed 0" in again.stdout
