"""The metrics table of docs/training.md is the one in marft_algos.runs.metrics."""

from __future__ import annotations

from pathlib import Path

from marft_algos.runs.metrics import METRICS, metrics_table

TRAINING = Path(__file__).resolve().parents[2] / "docs" / "training.md"
MARKER = "<!-- The table below is marft_algos.runs.metrics.metrics_table()"


def test_the_docs_metrics_table_is_generated_from_the_library_table():
    lines = TRAINING.read_text(encoding="utf-8").splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.startswith(MARKER)) + 1
    end = next(i for i in range(start, len(lines)) if not lines[i].startswith("|"))
    documented = "".join(lines[start:end])
    assert documented == metrics_table(), (
        "docs/training.md's metrics table differs from marft_algos.runs.metrics.METRICS; replace it "
        "with the output of: python -c 'from marft_algos.runs.metrics import metrics_table; "
        'print(metrics_table(), end="")\''
    )


def test_every_meaning_is_one_line():
    for name, meaning in METRICS.items():
        assert meaning and "\n" not in meaning and "|" not in meaning, name
