"""The paired before → after line of ``marft train`` and ``marft eval``, ``marft eval
--attribution``, and transcripts that show system prompts, the final info and reward parts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from budgets import TINY

from marft_algos.cli.main import main

BUDGET = [*TINY, "--no-plot", "--progress", "plain"]


@pytest.fixture(scope="module")
def run(tiny_path, tmp_path_factory) -> tuple[Path, dict]:
    folder = tmp_path_factory.mktemp("attribution") / "run"
    result = main(
        ["train", "--output-dir", str(folder), "--model", tiny_path, "--iterations", "1", *BUDGET]
    )
    return folder, result


def _records(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]


def test_training_ends_with_the_paired_line_on_the_same_episodes(run, capsys) -> None:
    folder, result = run
    outcomes = [json.loads(x) for x in (folder / "eval_outcomes.jsonl").read_text().splitlines()]
    assert [(r["iteration"], r["prefix"]) for r in outcomes] == [(0, "eval"), (1, "eval")]
    first, last = (r["episodes"] for r in outcomes)
    assert [(e["seed"], e["options"]) for e in first] == [(e["seed"], e["options"]) for e in last]
    paired = result["paired"]["eval"]
    records = _records(folder)
    assert paired["eval/n"] == 4
    assert paired["eval/before"] == records[0]["eval/accuracy"]
    assert paired["eval/after"] == records[-1]["eval/accuracy"]


def test_eval_compares_with_the_untuned_team_and_attributes(run, tmp_path, capsys) -> None:
    folder, _ = run
    out = tmp_path / "eval.json"
    metrics = main(["eval", str(folder), "--attribution", "--json", str(out)])
    printed = json.loads(out.read_text())
    assert printed["attribution"] == metrics["attribution"]
    records = _records(folder)
    # The untuned team is the team before training: the run's iteration-0 evaluation.
    assert metrics["before/accuracy"] == records[0]["eval/accuracy"]
    assert metrics["eval/accuracy"] == records[-1]["eval/accuracy"]
    assert metrics["paired/n"] == 4
    rows = metrics["attribution"]["greedy"]
    assert [r["setting"] for r in rows] == [
        "all tuned",
        "all untuned",
        "reasoner reverted = actor alone tuned",
        "actor reverted = reasoner alone tuned",
    ]
    assert rows[0]["accuracy"] == metrics["eval/accuracy"]
    assert rows[1]["accuracy"] == metrics["before/accuracy"]
    assert all("accuracy_difference_se" in r and "reward_difference_se" in r for r in rows)
    saved = json.loads((folder / "attribution.json").read_text())
    assert saved["greedy"] == rows and saved["checkpoint"] == "checkpoint-1"
    # Greedy answers reused: 4 settings cost less than 4 evaluations (8 decisions each).
    generations = metrics["attribution"]["generations"]
    assert generations["run"] + generations["reused"] == 4 * 8
    assert generations["reused"] >= 8  # at least the reasoner's, tuned and untuned, 4 each

    plain = main(["eval", str(folder), "--no-before"])
    assert "before/accuracy" not in plain and "attribution" not in plain


def test_eval_transcripts_show_system_prompts_once_and_the_final_info(run, capsys) -> None:
    folder, _ = run
    capsys.readouterr()
    metrics = main(["eval", str(folder), "--samples", "2", "--no-before"])
    out = capsys.readouterr().out
    assert out.count("reasoner's system prompt:") == 1 and out.count("actor's system prompt:") == 1
    assert out.count("final info") == 2 and '"gold":' in out
    assert len(metrics["samples"]) == 2
    main(["eval", str(folder), "--samples", "2", "--no-before", "--show-system"])
    assert capsys.readouterr().out.count("reasoner's system prompt:") == 2
    main(["eval", str(folder), "--samples", "1", "--no-before", "--json", "-"])
    shown = json.loads(capsys.readouterr().out)
    turn = shown["samples"][0]["turns"][0]
    assert turn["messages"][0]["role"] == "system" and "gold" in shown["samples"][0]["info"]


def test_sampled_attribution_compares_the_same_settings(run) -> None:
    folder, _ = run
    metrics = main(["eval", str(folder), "--attribution", "--attribution-sampled"])
    greedy, sampled = metrics["attribution"]["greedy"], metrics["attribution"]["sampled"]
    assert [r["setting"] for r in sampled] == [r["setting"] for r in greedy]
    assert all(r["episodes"] == 4 for r in sampled)


def test_the_final_table_has_a_column_per_reward_part(tmp_path) -> None:
    from types import SimpleNamespace

    from rich.console import Console

    from marft_algos.cli.run_report import summarize

    evals = [
        {
            "iteration": i,
            "eval/accuracy": 0.5,
            "eval/episodes": 4,
            "eval/reward/success": s,
            "eval/reward/cost": -0.25 * (i + 1),
        }
        for i, s in ((0, 0.5), (3, 0.75))
    ]
    console = Console(record=True, width=200)
    summarize(console, evals, SimpleNamespace(output_dir=str(tmp_path), temperature=1.0))
    lines = console.export_text().splitlines()
    header = next(line for line in lines if "greedy" in line)
    assert "reward/cost" in header and "reward/success" in header
    last = next(line for line in lines if line.strip("│ ").startswith("3 "))
    assert "0.750" in last and "-1.000" in last
