"""The example scripts run end to end with tiny budgets, in a subprocess, as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from budgets import TINY

ROOT = Path(__file__).resolve().parents[2]
# The scripts import the packages of this checkout, whatever else is installed; tiny models want
# one thread (see tests/conftest.py).
ENV = {
    **os.environ,
    "OMP_NUM_THREADS": "1",
    "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
}


def launch(*command: str) -> subprocess.CompletedProcess:
    """Run a command as a user would, from the checkout, with one thread per process."""
    return subprocess.run(
        [sys.executable, *command],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
        # tiny models: see tests/conftest.py; PYTHONPATH: this checkout's packages, not an install's
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)},
    )


def run(script: str, *args: str) -> subprocess.CompletedProcess:
    result = launch(str(ROOT / "examples" / script), *args)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def run_once(script: str, model: str, out, *extra: str) -> subprocess.CompletedProcess:
    """``script`` for one iteration on the tiny budget, into ``out``, without a plot."""
    return run(
        script,
        "--model",
        model,
        "--iterations",
        "1",
        "--output-dir",
        str(out),
        "--no-plot",
        *TINY,
        *extra,
    )


@pytest.fixture(scope="module")
def model_path():
    from marft_algos.policy import tiny_model_path

    return str(tiny_model_path())


def test_help_documents_every_option(monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")  # one help entry per line, whatever the terminal
    out = run("train_math.py", "--help").stdout
    for flag in (
        "--algo",
        "--env",
        "--model",
        "--iterations",
        "--seed",
        "--output-dir",
        "--resume",
        "--ppo-epochs",
    ):
        assert flag in out
    assert "(default: marft-tiny-math)" in out and "--num-generations" not in out
    grpo = run("train_math.py", "--algo", "grpo", "--help").stdout
    assert (
        "--num-generations" in grpo
        and "Episodes per task (the group size G, or K). (default: 4)" in grpo
    )


# The script hands --algo to the same registry for every algorithm: one actor-critic run in the
# fast suite, the other five with -m slow (each trainer runs in the fast
# suite in tests/algos/trainers: test_trainers.py, test_real_model_trainers.py).
SLOW = pytest.mark.slow


@pytest.mark.parametrize(
    ("algo", "env", "extra"),
    [
        ("action-marft", "math-dual-v7", []),
        pytest.param("token-marft", "math-dual-v7", [], marks=SLOW),
        pytest.param("ppo", "math-single-v7", ["--level", "token"], marks=SLOW),
        pytest.param("grpo", "math-dual-v7", ["--num-generations", "2"], marks=SLOW),
        pytest.param(
            "rloo", "math-dual-v7", ["--num-generations", "2", "--level", "token"], marks=SLOW
        ),
        pytest.param("reinforce-pp", "math-dual-v7", [], marks=SLOW),
    ],
)
def test_train_math_runs_every_algorithm(algo, env, extra, model_path, tmp_path):
    out = tmp_path / algo
    run(
        "train_math.py",
        "--algo",
        algo,
        "--env",
        env,
        "--model",
        model_path,
        "--iterations",
        "1",
        "--output-dir",
        str(out),
        *TINY,
        *extra,
    )
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert records[0]["iteration"] == 0 and "eval/accuracy" in records[0]
    last = records[-1]  # a step was taken, or the update says it had nothing to learn from
    assert last["iteration"] == 1 and (
        "train/policy_loss" in last or last["train/skipped_empty"] == 1
    )
    assert json.loads((out / "config.json").read_text())["algorithm"] == algo
    assert (out / "learning_curve.png").stat().st_size > 1000
    assert (out / "checkpoint-1" / "manifest.json").exists()


# -m slow (the suite's time): stopping, resuming and evaluating a run are tested through the
# command line (tests/cli/test_cli_runs.py, test_run_folder_integrity.py), which the script calls.
@pytest.mark.slow
def test_stop_resume_and_evaluate(model_path, tmp_path):
    out = tmp_path / "run"
    common = ["--model", model_path, "--output-dir", str(out), "--checkpoint-every", "1", *TINY]
    run("train_math.py", "--iterations", "1", *common)
    resumed = run("train_math.py", "--iterations", "2", "--resume", *common, "--no-plot")
    assert "resumed at iteration 1" in resumed.stdout
    iterations = [
        json.loads(line)["iteration"] for line in (out / "metrics.jsonl").read_text().splitlines()
    ]
    assert iterations == [0, 1, 2]
    result = run("evaluate.py", str(out), "--no-before", "--json", "-")
    metrics = json.loads(result.stdout[result.stdout.index("{") :])
    final = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()][-1]
    assert metrics["eval/accuracy"] == final["eval/accuracy"] and "eval/accuracy/actor" in metrics


def test_evaluate_rejects_a_checkpoint_from_another_team(model_path, tmp_path):
    out = tmp_path / "single"
    run_once("train_math.py", model_path, out, "--env", "math-single-v7")
    result = launch(
        str(ROOT / "examples" / "evaluate.py"),
        str(out / "checkpoint-1"),
        "--env",
        "math-dual-v7",
        "--episodes",
        "2",
    )
    assert (
        result.returncode == 2
        and "do not match" in result.stderr
        and "Traceback" not in result.stderr
    )


def test_custom_env_example_registers_and_trains(model_path):
    result = run(
        "custom_env.py",
        "--model",
        model_path,
        "--iterations",
        "1",
        "--episodes-per-iteration",
        "4",
        "--max-new-tokens",
        "6",
    )
    assert "held-out accuracy: before" in result.stdout


# -m slow (the suite's time): two-process training under torchrun runs in
# tests/algos/trainers/test_distributed.py and test_fsdp.py.
@pytest.mark.slow
def test_train_math_under_torchrun_on_two_processes(model_path, tmp_path):
    # The main job's launch path under a standard launcher: two CPU ranks, gloo on 127.0.0.1.
    out = tmp_path / "ddp"
    result = launch(
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--standalone",  # the launcher binds a free port itself: no window for another job
        str(ROOT / "examples" / "train_math.py"),
        "--model",
        model_path,
        "--iterations",
        "2",
        "--checkpoint-every",
        "1",
        "--output-dir",
        str(out),
        *TINY,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert result.stdout.count("held-out accuracy") == 1  # rank 0 alone prints
    # The console wraps long lines (the output path's length decides where): compare words.
    assert "2 processes" in " ".join(result.stdout.split())
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in records] == [0, 1, 2]  # each iteration logged once
    assert all(r["rollout/episodes"] == 4 for r in records[1:])  # the global batch
    assert (out / "checkpoint-2" / "manifest.json").exists() and (
        out / "learning_curve.png"
    ).exists()
    # The run's checkpoint evaluates on one process and gives the distributed run's final accuracy.
    evaluated = run("evaluate.py", str(out), "--no-before", "--json", "-")
    metrics = json.loads(evaluated.stdout[evaluated.stdout.index("{") :])
    assert metrics["eval/accuracy"] == records[-1]["eval/accuracy"]


@pytest.mark.slow  # about 50 s; tests/algos/trainers/test_real_model_trainers.py trains it too
def test_real_model_trains_on_gsm8k_with_its_own_preset_and_evaluates(
    smollm2_path, shared_data, tmp_path
):
    out = tmp_path / "smollm2"
    gsm8k = str(shared_data / "gsm8k_test.jsonl")
    result = run(
        "train_math.py",
        "--model",
        "smollm2-135m-instruct",
        "--dataset",
        gsm8k,
        "--iterations",
        "1",
        "--output-dir",
        str(out),
        "--no-plot",
        *TINY,
    )
    assert "preset smollm2-cpu" in result.stdout
    config = json.loads((out / "config.json").read_text())
    assert (
        config["learning_rate"] == 1e-4 and config["ppo_epochs"] == 1
    )  # not the 1M model's demo preset
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["iteration"] == 1 and records[-1]["train/approx_kl"] < 1e-6
    # The run's own settings (the preset's 48-token messages), on two of its held-out problems.
    evaluated = run("evaluate.py", str(out), "--episodes", "2", "--no-before", "--json", "-")
    metrics = json.loads(evaluated.stdout[evaluated.stdout.index("{") :])
    assert 0.0 <= metrics["eval/accuracy"] <= 1.0 and metrics["eval/action_tokens_mean"] <= 48


def test_other_models_do_not_get_the_builtin_models_preset(model_path, tmp_path):
    out = tmp_path / "other"
    result = run_once("train_math.py", model_path, out)
    assert "preset pretrained" in result.stdout
    assert json.loads((out / "config.json").read_text())["learning_rate"] == 2e-5


def test_program_team_example_trains_the_help_desk(model_path, tmp_path):
    out = tmp_path / "program"
    result = run_once("program_team.py", model_path, out)
    assert "held-out accuracy" in result.stdout
    record = json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])
    assert record["rollout/calls/planner"] == 1.0 and "rollout/reward/cost" in record
    assert json.loads((out / "config.json").read_text())["run"]["env"]["id"] == "helpdesk-v0"
