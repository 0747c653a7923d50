"""Runs through the command line: a default run killed with -9 resumes losing at most one
iteration and logs what the uninterrupted run logs; a second run on a busy folder is refused;
``marft eval`` reproduces the final held-out accuracy; custom envs train; export loads elsewhere."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from budgets import TINY

from marft_algos.cli.main import main
from marft_algos.runs.folder import RunInUseError

ROOT = Path(__file__).resolve().parents[2]
BUDGET = [*TINY, "--eval-every", "1", "--no-plot", "--progress", "plain"]


def train(run, tiny_path, iterations, *extra):
    """``marft train`` on the tiny model with the suite's budget, into ``run``."""
    return main(
        [
            "train",
            "--output-dir",
            str(run),
            "--model",
            tiny_path,
            "--iterations",
            str(iterations),
            *BUDGET,
            *extra,
        ]
    )


def records(run: Path) -> list[dict]:
    rows = [
        json.loads(line)
        for line in (run / "metrics.jsonl").read_text().splitlines()
        if line.strip()
    ]
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]


def command(*args: str, cwd: Path, extra_path: str = "") -> subprocess.Popen:
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), extra_path) if p),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "marft_algos.cli", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_kill_9_resume_and_eval_reproduce_the_uninterrupted_run(tiny_path, tmp_path):
    common = ["--model", tiny_path, "--iterations", "4", *BUDGET]
    straight = tmp_path / "straight"
    main(["train", "--output-dir", str(straight), *common])

    killed = tmp_path / "killed"
    proc = command("train", "--output-dir", str(killed), *common, cwd=tmp_path)
    deadline = time.time() + 300
    while time.time() < deadline and not (
        (killed / "metrics.jsonl").exists() and len(records(killed)) >= 3
    ):
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()[1][-2000:]
    with pytest.raises(
        RunInUseError, match=r"is in use by process \d+.*choose another --output-dir"
    ):
        main(["train", "--output-dir", str(killed), *common, "--resume"])
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    logged = max(r["iteration"] for r in records(killed))
    (killed / "metrics.jsonl").open("a").write('{"iteration": 9, "eval/acc')  # a torn last line
    (killed / ".checkpoint-9.tmp-x").mkdir()  # a checkpoint write cut short

    result = main(["train", "--output-dir", str(killed), *common, "--resume"])
    first_new = result["records"][0]["iteration"]
    assert (
        logged < 4 and first_new >= logged
    )  # killed mid-run; redoes at most the last logged iteration
    assert records(killed) == records(straight)  # eval_sampled included: its RNG was saved
    assert not (killed / ".checkpoint-9.tmp-x").exists()
    assert sorted(p.name for p in killed.glob("checkpoint-*")) == ["checkpoint-3", "checkpoint-4"]
    assert [r["iteration"] for r in result["evals"]] == [
        0,
        1,
        2,
        3,
        4,
    ]  # before → after even after resume

    out = tmp_path / "eval.json"
    metrics = main(["eval", str(straight), "--json", str(out)])
    final = records(straight)[-1]
    assert json.loads(out.read_text()) == metrics
    for key, value in final.items():
        if key.startswith("eval/"):
            assert metrics[key] == value, key


def test_resume_with_changed_settings_is_refused_and_keeps_config(tiny_path, tmp_path):
    run = tmp_path / "run"
    main(["train", "--output-dir", str(run), "--model", tiny_path, "--iterations", "1", *BUDGET])
    before = (run / "config.json").read_bytes()
    with pytest.raises(
        ValueError, match=r"learning_rate: checkpoint 2e-05 vs now 0.5.*--allow-config-change"
    ):
        train(run, tiny_path, 2, "--learning-rate", "0.5", "--resume")
    with pytest.raises(ValueError, match=r"env_id: run 'math-dual-v7' vs now 'math-trio-v7'"):
        train(
            run,
            tiny_path,
            2,
            "--env",
            "math-trio-v7",
            "--max-new-tokens-per-agent",
            "{}",
            "--resume",
        )
    # The dtype and the thread count change what the remaining iterations compute.
    for flags, message in (
        (["--dtype", "bfloat16"], r"dtype: run 'float32' vs now 'bfloat16'"),
        (["--threads", "2"], r"threads: run 1 vs now 2"),
    ):
        with pytest.raises(ValueError, match=message):
            train(run, tiny_path, 2, *flags, "--resume")
    assert (run / "config.json").read_bytes() == before
    train(run, tiny_path, 1, "--overwrite")
    assert [r["iteration"] for r in records(run)] == [0, 1]


def test_custom_env_trains_and_evaluates_from_the_command_line(tiny_path, tmp_path, user_package):
    run = tmp_path / "triage"
    result = main(
        [
            "train",
            "--env",
            "user_envs.triage:triage-v0",
            "--output-dir",
            str(run),
            "--model",
            tiny_path,
            "--iterations",
            "1",
            *BUDGET,
        ]
    )
    config = json.loads((run / "config.json").read_text())
    assert (
        config["run"]["env"]["id"] == "triage-v0"
        and config["run"]["env_id"] == "user_envs.triage:triage-v0"
    )
    assert config["max_new_tokens_per_agent"] is None  # the math preset's actor cap does not apply
    metrics = main(["eval", str(run / "checkpoint-1"), "--no-before"])
    assert metrics["eval/accuracy"] == result["evals"][-1]["eval/accuracy"]
    assert metrics["eval/action_tokens_mean"] == result["evals"][-1]["eval/action_tokens_mean"]


def test_export_adapters_and_merged_models(tiny_path, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from marft_algos.runs.checkpoint import policy_from_checkpoint

    run = tmp_path / "run"
    train(run, tiny_path, 1, "--learning-rate", "0.05")
    index = main(["export", str(run), "--merge"])
    policy = policy_from_checkpoint(str(run / "checkpoint-1"))
    ids = torch.tensor([[1, 5, 9, 14, 3]])
    for agent in ("reasoner", "actor"):
        entry = index["agents"][agent]
        merged = AutoModelForCausalLM.from_pretrained(run / "export" / entry["merged"])
        base = AutoModelForCausalLM.from_pretrained(tiny_path)
        peft_model = PeftModel.from_pretrained(base, str(run / "export" / entry["adapter"]))
        with torch.no_grad(), policy.acting(agent) as model:
            trained = model(ids).logits
            assert torch.allclose(merged(ids).logits, trained, atol=1e-4)
            assert torch.allclose(peft_model(ids).logits, trained, atol=1e-5)
        with torch.no_grad(), policy.acting(agent, reference=True) as model:
            assert not torch.allclose(
                model(ids).logits, trained, atol=1e-4
            )  # the adapter changed something
    exported = json.loads((run / "export" / "marft_export.json").read_text())
    assert exported["agents"]["actor"]["adapter"] == "actor/adapter"
    # The adapter names the base by a portable id, not a path of this machine.
    adapter = run / "export" / "actor" / "adapter"
    config = json.loads((adapter / "adapter_config.json").read_text())
    # (the suite's tiny model is a local folder: named by its folder name, marked not portable;
    # short names, GGUF sources and Hub ids are tested in tests/algos/policy/test_portable_base.py)
    assert config["base_model_name_or_path"] == Path(tiny_path).name
    assert json.loads((adapter / "base_model.json").read_text())["portable"] is False
    assert str(tmp_path) not in (run / "export" / "marft_export.json").read_text()
    # Merged models in the dtype asked for (half of float32's size in bfloat16).
    main(["export", str(run), "--merge", "--merged-dtype", "bfloat16", "--output-dir", "bf16"])
    merged = AutoModelForCausalLM.from_pretrained("bf16/actor/merged", dtype="auto")
    assert merged.dtype == torch.bfloat16
    size = {
        d: (Path(root) / "actor" / "merged" / "model.safetensors").stat().st_size
        for d, root in (("f32", run / "export"), ("bf16", "bf16"))
    }
    assert size["bf16"] < 0.6 * size["f32"]


def test_command_errors_are_one_line_without_a_traceback(tmp_path):
    proc = command("train", "--threads", "0", cwd=tmp_path)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2
    assert "marft train: error: --threads 0: torch needs at least one thread" in err
    assert "Traceback" not in err


def test_run_shows_samples_and_qualified_accuracies_and_eval_prints_transcripts(
    tiny_path, tmp_path, capsys
):
    run = tmp_path / "run"
    main(["train", "--output-dir", str(run), "--model", tiny_path, "--iterations", "1", *BUDGET])
    out = capsys.readouterr().out
    rows = [json.loads(x) for x in (run / "samples.jsonl").read_text().splitlines()]
    assert {r["iteration"] for r in rows} == {0, 1}
    assert "held-out samples at iteration 1" in out
    assert "(n=4)" in out and "±" in out  # every accuracy with its count and standard error
    main(["eval", str(run), "--samples", "2", "--no-before"])
    out = capsys.readouterr().out
    assert out.count("episode ") >= 2 and "reasoner (round 0) read:" in out
    assert "actor said (reward" in out and "accuracy " in out


@pytest.mark.parametrize("algo", ["rloo", "reinforce-pp"])
def test_critic_free_estimators_train_the_builtin_team_from_the_command_line(
    algo, tiny_path, tmp_path
):
    out = tmp_path / algo
    result = main(
        [
            "train",
            "--algo",
            algo,
            "--model",
            tiny_path,
            "--iterations",
            "2",
            "--output-dir",
            str(out),
            *BUDGET,
        ]
    )
    trained = [r for r in records(out) if "train/policy_loss" in r]
    assert [r["iteration"] for r in trained] == [1, 2]
    for r in trained:
        assert math.isfinite(r["train/policy_loss"]) and math.isfinite(r["train/kl"])
        assert r["train/skipped_nonfinite"] == 0
    assert trained[0]["train/approx_kl"] < 1e-3  # the first update starts at ratio 1
    assert result["config"]["beta"] > 0  # the KL penalty in the reward is on by default
    assert json.loads((out / "config.json").read_text())["algorithm"] == algo
