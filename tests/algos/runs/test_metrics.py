"""metrics.jsonl and TensorBoard output."""

from __future__ import annotations

import json

import pytest

from marft_algos.runs.metrics import MetricsLogger


def test_jsonl_records_nonfinite_values_and_truncation(tmp_path):
    log = MetricsLogger(tmp_path)
    for step in range(4):
        log.log(
            step,
            {
                "train/policy_loss": float(step),
                "train/approx_kl": float("nan") if step == 2 else 0.0,
            },
        )
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [0, 1, 2, 3]
    assert rows[2]["train/approx_kl"] == "nan"  # JSON has no NaN: kept visible as a string
    log.truncate_after(1)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [0, 1] and len(log.records) == 2


def test_tensorboard_scalars_are_written(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    log = MetricsLogger(tmp_path, tensorboard=True)
    log.log(1, {"eval/accuracy": 0.5, "train/agents": "actor"})
    log.log(2, {"eval/accuracy": 0.75})
    log.close()
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("eval/accuracy")] == [(1, 0.5), (2, 0.75)]


def test_tensorboard_needs_a_directory():
    with pytest.raises(ValueError, match="needs an output_dir"):
        MetricsLogger(None, tensorboard=True)


def test_a_fresh_run_replaces_old_records(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"iteration": 7}\n')
    log = MetricsLogger(tmp_path)
    log.truncate_after(-1)
    log.log(0, {"eval/accuracy": 0.1})
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [0]
