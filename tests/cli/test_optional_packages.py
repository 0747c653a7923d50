"""Optional packages (matplotlib for the learning curve, tensorboard) missing never fail a run that
did its work: each is one warning line naming the install command, and the run ends normally."""

from __future__ import annotations

import json
import logging
import sys

from budgets import TINY

from marft_algos.cli.main import main
from marft_algos.runs.metrics import MetricsLogger


def test_missing_matplotlib_and_tensorboard_are_one_warning_each(
    tiny_path, tmp_path, monkeypatch, caplog
):
    for name in ("matplotlib", "matplotlib.pyplot", "torch.utils.tensorboard"):
        monkeypatch.setitem(sys.modules, name, None)  # the import fails as if not installed
    run = tmp_path / "run"
    with caplog.at_level(logging.WARNING):
        result = main(
            [
                "train",
                "--output-dir",
                str(run),
                "--model",
                tiny_path,
                "--iterations",
                "1",
                "--tensorboard",
                *TINY,
                "--progress",
                "off",
            ]
        )
    assert result["evals"], "the run finished and evaluated"
    assert (run / "metrics.jsonl").exists() and not (run / "learning_curve.png").exists()
    assert not (run / "tensorboard").exists()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    plot = [w for w in warnings if "learning_curve.png" in w]
    board = [w for w in warnings if "tensorboard package" in w]
    assert len(plot) == 1 and "pip install matplotlib" in plot[0] and "--no-plot" in plot[0]
    assert len(board) == 1 and "pip install tensorboard" in board[0]
    assert all("\n" not in w for w in plot + board)


def test_metrics_logger_without_tensorboard_still_writes_metrics(tmp_path, monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    with caplog.at_level(logging.WARNING):
        log = MetricsLogger(tmp_path, tensorboard=True)
    log.log(0, {"eval/accuracy": 0.5})
    log.log_text("eval/samples", "text", 0)
    log.close()
    assert json.loads((tmp_path / "metrics.jsonl").read_text())["eval/accuracy"] == 0.5
    assert "pip install tensorboard" in caplog.text
