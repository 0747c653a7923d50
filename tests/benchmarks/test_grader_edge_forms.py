"""The grader's edge-forms benchmark (benchmarks/grader/edge_forms.py) holds its recorded result:
no wrong answer paid, and no more right answers refused than RESULTS.md reports."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "grader"))

from edge_forms import CASES, PROBLEM, grade_set


def test_the_edge_forms_set_is_paid_as_recorded():
    assert len(CASES) >= 139 and len({(c.answer, c.gold) for c in CASES}) == len(CASES)
    result = grade_set(CASES, PROBLEM)
    assert result["paid_wrong"] == 0, result["paid"]
    assert result["refused"] == [
        ["units", "5\\,\\text{m}", "5"],
        ["trailing period", "The answer is 5.", "5"],
        ["words around", "The answer is **12**.", "12"],
    ]
