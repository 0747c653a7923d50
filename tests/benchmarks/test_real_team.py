"""benchmarks/real_team: the transcript reading is right on hand-made episodes, and the two scripts
run end to end (on the built-in tiny model, slow) into a summary.json of the issue's format."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "benchmarks" / "real_team"
sys.path.insert(0, str(FOLDER))

from summarize import last_result, states_a_number, transcript_stats  # noqa: E402


def _row(gold: str, correct: bool, *turns: tuple[str, str, bool]) -> dict:
    return {
        "info": {"gold": gold},
        "correct": correct,
        "turns": [{"agent": a, "action": text, "finished": done} for a, text, done in turns],
    }


def test_last_result_reads_the_number_after_the_last_equals_sign() -> None:
    assert last_result("8 \\times 4 - 2 = 32 - 2 = 30.") == "30"
    assert last_result("6 - 4 - 2 = -0.5 so") == "-0.5"
    assert last_result("The sum is 12") is None  # no worked result
    assert last_result("3 + 4 = seven") is None


def test_transcript_stats_counts_format_arithmetic_and_hand_off() -> None:
    rows = [
        # Right result, boxed by the actor: a clean hand-off.
        _row("7", True, ("reasoner", "3 + 4 = 7", True), ("actor", "\\boxed{7}", True)),
        # Right result, lost: the actor boxed something else.
        _row("12", False, ("reasoner", "3 \\times 4 = 12", True), ("actor", "\\boxed{7}", True)),
        # Wrong result, fixed by the actor (cut off mid-sentence).
        _row("5", True, ("reasoner", "9 - 4 = 6", True), ("actor", "9 - 4 = 5 \\boxed{5}", False)),
        # No result at all, nothing boxed.
        _row("2", False, ("reasoner", "We subtract.", False), ("actor", "The answer", False)),
    ]
    stats = transcript_stats(rows)
    assert stats["episodes"] == 4
    assert stats["reasoner"] == {
        "chars_mean": round(
            sum(len(t) for t in ("3 + 4 = 7", "3 \\times 4 = 12", "9 - 4 = 6", "We subtract.")) / 4,
            1,
        ),
        "cut": 0.25,
        "boxed": 0.0,
        "has_result": 0.75,
        "result_right": 0.5,
    }
    assert stats["actor"]["boxed"] == 0.75
    assert stats["actor"]["cut"] == 0.5
    assert stats["actor"]["result_right"] == 0.25  # "= 5" in the third
    assert stats["handoff"] == {
        "actor_boxes_reasoner_result": 0.25,
        "right_result_lost": 0.25,
        "actor_fixed": 0.25,
    }


def test_a_restated_expression_is_right_for_the_env_but_not_a_number_answer() -> None:
    from marft_envs.math.grading import grade_answer

    # The hole the strict accuracy excludes from v2 transcripts; the grader closes it since v3.
    assert not grade_answer("6 \\times 8 - 9.", "39")
    assert not states_a_number("6 \\times 8 - 9.")
    assert states_a_number("6 \\times 8 - 9 = 48 - 9 = 39.")
    assert states_a_number("\\boxed{-4}") and states_a_number("2.5")
    assert not states_a_number("The answer is 39.")  # no answer the env reads
    rows = [
        _row(
            "39",
            True,
            ("reasoner", "6 \\times 8 - 9 = 12.", True),
            ("actor", "6 \\times 8 - 9.", True),
        ),
        _row("7", True, ("reasoner", "3 + 4 = 7", True), ("actor", "3 + 4 = 7", True)),
    ]
    stats = transcript_stats(rows)
    assert stats["restated"] == 0.5 and stats["strict_accuracy"] == 0.5


@pytest.mark.slow
def test_run_and_summarize_end_to_end_on_the_tiny_model(tmp_path: Path) -> None:
    from marft_algos.policy import tiny_model_path

    out = tmp_path / "results"
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path}
    run = [
        sys.executable,
        str(FOLDER / "run.py"),
        "--model",
        str(tiny_model_path()),
        "--iterations",
        "2",
        "--episodes-per-iteration",
        "8",
        "--eval-every",
        "1",
        "--eval-episodes",
        "4",
        "--out",
        str(out),
        "--jobs",
    ]
    for seed in ("0", "1"):
        jobs = [f"dual:{seed}", f"ppo:{seed}", f"grpo:{seed}"]
        result = subprocess.run(run + jobs, capture_output=True, text=True, timeout=900, env=env)
        assert result.returncode == 0, result.stderr[-3000:]
    job = json.loads((out / "dual-seed1.json").read_text())
    assert [it for it, _ in job["curve"]] == [0, 1, 2]
    assert len(job["rollout_reward"]) == 2
    assert 0.0 <= job["noise_before"] <= 1.0 and 0.0 <= job["noise_after"] <= 1.0
    summary_path = tmp_path / "summary.json"
    result = subprocess.run(
        [
            sys.executable,
            str(FOLDER / "summarize.py"),
            "--out",
            str(out),
            "--summary",
            str(summary_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(summary_path.read_text())
    assert summary["model"] == str(tiny_model_path())
    assert summary["seeds"] == [0, 1]
    assert set(summary["settings"]) == {
        "dual_untuned",
        "dual_tuned",
        "single_untuned",
        "single_tuned_ppo",
        "single_tuned_grpo",
    }
    for values in summary["settings"].values():
        assert len(values) == 2 and all(0.0 <= v <= 1.0 for v in values)
    # The untuned model is the same for every seed (fresh adapters change nothing), greedy.
    assert summary["settings"]["dual_untuned"][0] == summary["settings"]["dual_untuned"][1]
    strict = summary["settings_number_answers_only"]
    for name, values in strict.items():  # a subset of the env's right answers
        assert all(0.0 <= v <= w for v, w in zip(values, summary["settings"][name], strict=True))
    assert (out / "transcripts.jsonl").is_file()
    assert "| dual_tuned |" in result.stdout and "iteration 2:" in result.stdout
