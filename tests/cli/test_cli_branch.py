"""``marft train --branch``: the short form and the JSON form parse, a bad value is one line
naming the form, the cost of a task is printed before the run, and the run logs the per-agent
branch metrics."""

from __future__ import annotations

import json

import pytest
from budgets import TINY

from marft_algos.cli.main import main
from marft_algos.cli.train import parse_train_args


def test_branch_flag_forms():
    _, _, values, given = parse_train_args(["--algo", "grpo", "--branch", "actor=3x4"])
    assert values["branch"] == {"actor": {"width": 3, "rollouts": 4}} and "branch" in given
    _, _, values, _ = parse_train_args(
        ["--algo", "grpo", "--branch", '{"actor": {"width": 2, "rollouts": 1}}']
    )
    assert values["branch"] == {"actor": {"width": 2, "rollouts": 1}}


def test_a_bad_branch_value_is_one_line_naming_the_form(capsys):
    with pytest.raises(SystemExit):
        parse_train_args(["--algo", "grpo", "--branch", "actor=3"])
    err = capsys.readouterr().err
    assert "AGENT=WIDTHxROLLOUTS" in err and len(err.splitlines()) == 1


def test_a_branched_run_prints_its_cost_and_logs_branch_metrics(tiny_path, tmp_path, capsys):
    run = tmp_path / "run"
    argv = ["train", "--algo", "grpo", "--model", tiny_path, "--output-dir", str(run)]
    argv += ["--iterations", "1", *TINY, "--num-generations", "1", "--branch", "actor=2x2"]
    main([*argv, "--no-plot", "--progress", "plain"])
    out = " ".join(capsys.readouterr().out.split())
    assert "Branching at actor 2×2: up to 4 episodes per task" in out
    record = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()][-1]
    assert record["rollout/episodes"] == 4 and "branch/actor/value_spread" in record
    assert json.loads((run / "config.json").read_text())["branch"] == {
        "actor": {"width": 2, "rollouts": 2}
    }


def test_a_config_file_takes_either_form(tmp_path):
    for text in ("branch: actor=2x3\n", "branch: {actor: {width: 2, rollouts: 3}}\n"):
        (tmp_path / "run.yaml").write_text(text)
        _, _, values, _ = parse_train_args(
            ["--algo", "grpo", "--config", str(tmp_path / "run.yaml")]
        )
        assert values["branch"] == {"actor": {"width": 2, "rollouts": 3}}
