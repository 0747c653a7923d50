"""The support-desk-v2 recipe pilots (benchmarks/program_team/pilot_v2.py): they evaluate on
training tickets only, and read the route share per department off the evaluation's samples."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "program_team"))
pilot_v2 = pytest.importorskip("pilot_v2")
tickets_v2 = pytest.importorskip("tickets_v2")


def test_eval_tickets_are_fixed_training_tickets() -> None:
    first, again = pilot_v2.eval_tickets(6), pilot_v2.eval_tickets(6)
    assert [t["request"] for t in first] == [t["request"] for t in again]
    held_out = {t["request"] for t in tickets_v2.test_tasks()}
    assert not held_out & {t["request"] for t in pilot_v2.eval_tickets(36)}


def test_agent_rates_parse_and_refuse_unknown_agents() -> None:
    assert pilot_v2.agent_rates("router=1e-4,reviewer=0") == {"router": 1e-4, "reviewer": 0.0}
    with pytest.raises(SystemExit, match="rooter"):
        pilot_v2.agent_rates("rooter=1e-4")


def test_evaluation_counts_routes_and_successes(tmp_path: Path) -> None:
    tasks = [{"department": "billing"}, {"department": "shipping"}]

    def episode(index: int, calls: dict[str, int], success: float) -> str:
        parts = {"success": success, "routed": float(index == 0), "parsed": 1.0}
        info = {"calls": calls, "reward_parts": parts}
        return json.dumps({"iteration": 0, "options": {"index": index}, "info": info})

    lines = [
        episode(0, {"router": 1, "billing": 1, "reviewer": 1}, 1.0),
        episode(1, {"router": 1, "billing": 2, "reviewer": 1}, 0.0),
    ]
    (tmp_path / "samples.jsonl").write_text("\n".join(lines) + "\n")
    row = pilot_v2.evaluation(tmp_path, tasks)[0]
    assert row["success"] == 0.5 and row["routed"] == 0.5
    assert row["route_share"] == {"billing": 1.0}
    assert row["successes_per_department"] == {"billing": 1.0, "shipping": 0.0}
