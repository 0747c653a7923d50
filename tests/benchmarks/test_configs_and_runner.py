"""benchmarks/configs: every YAML is accepted by ``marft train --config``; benchmarks/runner.py
records what a results file needs; benchmarks/sweep.py builds one ``marft train`` per seed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from marft_algos.cli.config_files import load_config_file
from marft_algos.cli.train import parse_train_args

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import runner  # noqa: E402
import sweep  # noqa: E402

CONFIGS = sorted((ROOT / "benchmarks" / "configs").rglob("*.yaml"))


def test_there_are_configs_for_the_main_job_and_the_comparison() -> None:
    names = {p.relative_to(ROOT / "benchmarks" / "configs").as_posix() for p in CONFIGS}
    assert "main_job.yaml" in names
    assert "comparison/dual-action-marft.yaml" in names
    assert "comparison/single-ppo-action.yaml" in names


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_config_is_accepted_by_marft_train(path: Path) -> None:
    written = load_config_file(str(path))
    args, config_class, values, given = parse_train_args(["--config", str(path)])
    config_class(**values)  # the trainer's own checks (__post_init__) pass too
    assert args.env == written["env"] and args.algo == written["algo"]
    assert set(written) <= given
    for name, value in written.items():
        if name in values and not isinstance(value, str):
            assert values[name] == value, name


def test_main_job_config_is_the_cpu_demo_preset() -> None:
    from marft_algos.cli.presets import DEMO_DEFAULTS

    _, _, values, _ = parse_train_args(["--config", str(ROOT / "benchmarks/configs/main_job.yaml")])
    _, _, plain, _ = parse_train_args([])
    assert values == plain
    assert {k: values[k] for k in DEMO_DEFAULTS if k in values} == {
        k: v for k, v in DEMO_DEFAULTS.items() if k in values
    }


def test_comparison_configs_match_the_comparison_script() -> None:
    sys.path.insert(0, str(ROOT / "benchmarks" / "comparison"))
    from run_comparison import SETTINGS, SHARED_HYPERPARAMETERS

    trained = [s for s in SETTINGS if s.algorithm is not None]
    assert {s.name for s in trained} == {p.stem for p in CONFIGS if p.parent.name == "comparison"}
    for setting in trained:
        path = ROOT / "benchmarks" / "configs" / "comparison" / f"{setting.name}.yaml"
        args, _, values, _ = parse_train_args(["--config", str(path)])
        assert (args.env, args.algo) == (setting.env_id, setting.algorithm)
        expected = {**SHARED_HYPERPARAMETERS, **setting.overrides, "iterations": 30}
        for name, value in expected.items():
            if name in values:
                assert values[name] == value, (setting.name, name)


def test_run_info_records_commit_envs_packages_and_machine() -> None:
    info = runner.run_info(["math-dual-v3", "math-single-v3", "math-dual-v3"], note="x")
    assert info["env_ids"] == ["math-dual-v3", "math-single-v3"]
    assert info["commit"] == "unknown" or len(info["commit"].split("+")[0]) == 40
    assert {"python", "marft", "torch", "transformers", "peft"} <= set(info["packages"])
    assert info["machine"]["cpu_count"] >= 1 and "gpu" in info["machine"]
    assert info["note"] == "x"
    json.dumps(info)


def test_commit_outside_a_checkout_is_unknown(tmp_path: Path) -> None:
    assert runner.commit(tmp_path) == "unknown"


def test_data_file_comes_from_data_dir_or_marft_data(tmp_path, monkeypatch) -> None:
    (tmp_path / "gsm8k_test.jsonl").write_text("{}\n")
    assert runner.data_file("gsm8k_test.jsonl", tmp_path) == tmp_path / "gsm8k_test.jsonl"
    monkeypatch.setenv("MARFT_DATA", str(tmp_path))
    assert runner.data_file("gsm8k_test.jsonl") == tmp_path / "gsm8k_test.jsonl"
    with pytest.raises(FileNotFoundError, match="MARFT_DATA"):
        runner.data_file("missing.jsonl")
    monkeypatch.delenv("MARFT_DATA")
    with pytest.raises(FileNotFoundError, match="--data-dir"):
        runner.data_file("gsm8k_test.jsonl")


def test_sweep_gives_each_seed_its_own_folder_and_passes_extra_flags(tmp_path) -> None:
    config = str(ROOT / "benchmarks/configs/main_job.yaml")
    args, extra = sweep.parse_args(
        [config, "--seeds", "3", "4", "--jobs", "2", "--", "--iterations", "1"]
    )
    assert (args.seeds, args.jobs, extra) == ([3, 4], 2, ["--iterations", "1"])
    command = sweep.train_command(config, 4, tmp_path / "seed4", extra)
    assert command[1:4] == ["-m", "marft_algos.cli", "train"]
    assert command[command.index("--seed") + 1] == "4"
    assert command[command.index("--output-dir") + 1] == str(tmp_path / "seed4")
    assert command[-2:] == ["--iterations", "1"]
    assert sweep.config_env_ids(config) == ["math-dual-v7"]
    assert sweep.portable(config) == "benchmarks/configs/main_job.yaml"


def test_sweep_reads_the_last_evaluation(tmp_path) -> None:
    (tmp_path / "metrics.jsonl").write_text(
        '{"iteration": 0, "eval/accuracy": 0.25}\n{"iteration": 1}\n'
        '{"iteration": 2, "eval/accuracy": 0.5}\n{"iter'
    )
    assert sweep.final_accuracy(tmp_path) == 0.5
    assert sweep.final_accuracy(tmp_path / "none") is None
