"""The branching benchmark (benchmarks/branching) end to end at a tiny budget: both arms train to
the token budget and evaluate; the signal and cost scripts run; the useful-decision count."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parents[2] / "benchmarks" / "branching"
sys.path.insert(0, str(HERE))
run = pytest.importorskip("run")
cost = pytest.importorskip("cost")
measure_signal = pytest.importorskip("measure_signal")

from marft_algos.rollout.collector import Decision, Episode  # noqa: E402


def test_runner_trains_both_arms_to_the_budget_and_evaluates(tmp_path):
    out = tmp_path / "results.json"
    result = run.main(
        ["--seeds", "0", "--budget", "300", "--tasks", "1", "--held-out", "4", "--out", str(out)]
    )
    assert json.loads(out.read_text())["summary"] == result["summary"]
    arms = {r["arm"]: r for r in result["runs"]}
    assert set(arms) == {"plain", "branched"}
    for r in arms.values():
        assert r["generated_tokens"] >= 300
        assert r["held_out_before"]["episodes"] == 4
        assert 0 <= r["held_out_after"]["right_choice"] <= 1
    # A tree generates the planner's 3 alternatives once, not once per continuation.
    assert (
        arms["branched"]["decisions_by_agent"]["planner"] * 4
        == (arms["branched"]["decisions_by_agent"]["solver"])
    )
    assert (
        arms["plain"]["decisions_by_agent"]["planner"]
        == (arms["plain"]["decisions_by_agent"]["solver"])
    )


def test_signal_and_cost_scripts_run(tmp_path):
    signal = measure_signal.main(
        ["--tasks", "2", "--continuations", "2", "--out", str(tmp_path / "s.json")]
    )
    assert 0 <= signal["success_given_right_choice"] <= 1
    costs = cost.main(
        ["--iterations", "1", "--repeats", "1", "--tasks", "1", "--out", str(tmp_path / "c.json")]
    )
    assert set(costs["summary"]) == {"plain", "branched"}
    assert costs["summary"]["branched"]["episodes_per_second"] > 0


def _episode(returns, group=None, branch=None, agents=("planner", "solver")):
    decisions = [Decision(0, 0, k, a, [], [], [], "", True) for k, a in enumerate(agents)]
    return Episode(0, {}, decisions, team_return=returns, group=group, branch=branch)


def test_useful_decisions_hand_counted():
    plain = [_episode(1.0, group=0), _episode(0.0, group=0), _episode(0.0, group=1)]
    plain.append(_episode(0.0, group=1))
    assert cost.useful_decisions("plain", plain) == {"planner": 2, "solver": 2}
    # One tree: alternative 0 wins 2 of 2, alternative 1 wins 1 of 2, alternative 2 never:
    # values 1, 0.5, 0; the middle one equals its siblings' mean (advantage 0).
    returns = {0: (1.0, 1.0), 1: (1.0, 0.0), 2: (0.0, 0.0)}
    tree = [_episode(r, branch=(0, w, m)) for w, rs in returns.items() for m, r in enumerate(rs)]
    assert cost.useful_decisions("branched", tree) == {"planner": 2, "solver": 2}
