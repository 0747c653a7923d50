"""``marft train`` / ``marft eval``: every bad input ends in a message naming the value and the fix,
before the model loads where it can; flags parse as documented."""

from __future__ import annotations

import json

import pytest
from budgets import TINY

from marft_algos.cli.main import main
from marft_algos.cli.parsing import UsageError
from marft_algos.cli.train import parse_train_args
from marft_algos.policy.config import ModelLoadError
from marft_algos.runs.folder import RunDirectoryError, RunExistsError

MISSING_MODEL = "/nonexistent/model-folder"  # proves a check ran before any model load


def train(*args):
    return main(["train", *args])


def test_none_reaches_literal_and_optional_fields():
    # The old parser dropped "none" as if the flag were unset.
    _, _, values, given = parse_train_args(
        ["--algo", "grpo", "--scale-rewards", "none", "--entropy-blowup-factor", "none"]
    )
    assert values["scale_rewards"] == "none" and values["entropy_blowup_factor"] is None
    assert {"scale_rewards", "entropy_blowup_factor"} <= given


def test_config_file_then_flags(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("algo: grpo\niterations: 7\nnum_generations: 2\nlearning_rate: 0.01\n")
    args, config_class, values, given = parse_train_args(
        ["--config", str(config), "--iterations", "3"]
    )
    assert args.algo == "grpo" and config_class.__name__ == "GRPOConfig"
    assert (
        values["iterations"] == 3
        and values["num_generations"] == 2
        and values["learning_rate"] == 0.01
    )
    assert "num_generations" in given


def test_config_file_with_a_field_of_another_trainer(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("num_generations: 2\n")
    with pytest.raises(UsageError, match=r"num_generations \(--algo grpo/rloo/reinforce-pp only\)"):
        parse_train_args(["--config", str(config)])


def test_malformed_dict_flag(capsys):
    with pytest.raises(SystemExit) as exit_info:
        train("--max-new-tokens-per-agent", "actor:8", "--model", MISSING_MODEL)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert (
        "--max-new-tokens-per-agent" in err
        and "'actor:8' is not a mapping" in err
        and '{"actor": 8}' in err
    )


def test_threads_zero():
    with pytest.raises(UsageError, match=r"--threads 0: .*--threads 1 or more"):
        train("--threads", "0", "--model", MISSING_MODEL)


def test_option_of_another_trainer(capsys):
    with pytest.raises(SystemExit):
        train("--num-generations", "4", "--model", MISSING_MODEL)
    assert (
        "--num-generations is an option of --algo grpo / rloo / reinforce-pp; --algo action-marft "
        "does not use it" in capsys.readouterr().err
    )


def test_token_level_option_for_an_action_level_trainer():
    # The config's own level check, its field names written as the flags.
    with pytest.raises(
        UsageError, match=r"--algo action-marft: --lam-token=0.9 only applies at token level"
    ):
        train("--lam-token", "0.9", "--model", MISSING_MODEL)
    with pytest.raises(
        UsageError, match=r"--logprob-normalization='token' only applies at action level"
    ):
        train("--algo", "token-marft", "--logprob-normalization", "token", "--model", MISSING_MODEL)


def test_contradictory_clip_range():
    with pytest.raises(UsageError, match=r"--epsilon-high=0.1 is below --epsilon=0.2"):
        train("--epsilon-high", "0.1", "--model", MISSING_MODEL, "--output-dir", "unused")


def test_ppo_on_a_team_is_refused_before_the_model_loads():
    with pytest.raises(
        UsageError, match=r"--algo ppo: PPO is the single-agent baseline.*\['reasoner', 'actor'\]"
    ):
        train("--algo", "ppo", "--env", "math-dual-v7", "--model", MISSING_MODEL)


def test_per_agent_caps_naming_missing_agents():
    with pytest.raises(
        UsageError, match=r"names agent\(s\) \['critic'\].*agents are \['reasoner', 'actor'\]"
    ):
        train("--max-new-tokens-per-agent", '{"critic": 4}', "--model", MISSING_MODEL)


def test_output_dir_that_is_a_file(tmp_path):
    target = tmp_path / "taken"
    target.write_text("not a folder")
    with pytest.raises(RunDirectoryError, match=r"exists and is a file.*another --output-dir"):
        train("--output-dir", str(target), "--model", MISSING_MODEL)


def test_model_path_that_does_not_exist(tmp_path):
    with pytest.raises(
        ModelLoadError, match=r"Model path '/nonexistent/model-folder' does not exist"
    ):
        train("--output-dir", str(tmp_path / "run"), "--model", MISSING_MODEL, *TINY)


def test_model_folder_that_is_not_a_model(tmp_path):
    folder = tmp_path / "weights"
    folder.mkdir()
    (folder / "notes.txt").write_text("hello")
    with pytest.raises(ModelLoadError, match=r"is not a Hugging Face model: it has no config.json"):
        train("--output-dir", str(tmp_path / "run"), "--model", str(folder), *TINY)


def test_dataset_that_is_not_utf8(tmp_path):
    data = tmp_path / "latin1.jsonl"
    data.write_bytes('{"problem": "café 1+1", "solution": "\\\\boxed{2}"}\n'.encode("latin-1"))
    with pytest.raises(
        UsageError,
        match=r"latin1.jsonl.*byte 16 \(line 1\): not valid UTF-8.*re-encode the file as UTF-8",
    ):
        train("--dataset", str(data), "--model", MISSING_MODEL)


def test_one_row_dataset(tmp_path):
    data = tmp_path / "one.jsonl"
    data.write_text(
        json.dumps(
            {"problem": "1+1", "solution": "\\boxed{2}", "level": "Level 1", "type": "Algebra"}
        )
        + "\n"
    )
    with pytest.raises(UsageError, match=r"has 1 problem\(s\); holding 10% out .*--eval-dataset"):
        train("--dataset", str(data), "--model", MISSING_MODEL)


def test_data_flags_for_an_env_without_a_dataset(user_package):
    with pytest.raises(
        UsageError, match=r"triage-v0 takes no dataset argument, so --dataset cannot reach it"
    ):
        train(
            "--env",
            "user_envs.triage:triage-v0",
            "--dataset",
            "builtin:train",
            "--model",
            MISSING_MODEL,
        )


def test_unknown_env_module():
    with pytest.raises(ImportError, match=r"Cannot import 'no_such_pkg.envs' for env 'x-v0'"):
        train("--env", "no_such_pkg.envs:x-v0", "--model", MISSING_MODEL)


def test_finished_run_is_not_overwritten(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"iterations": 2}))
    with pytest.raises(RunExistsError, match=r"already holds .*--resume .*--overwrite"):
        train("--output-dir", str(run), "--model", MISSING_MODEL)


def test_eval_of_a_folder_without_checkpoints(tmp_path):
    with pytest.raises(UsageError, match=r"neither a checkpoint nor a run folder"):
        main(["eval", str(tmp_path)])


def test_unknown_command(capsys):
    with pytest.raises(SystemExit):
        main(["trian"])
    assert "unknown command 'trian'" in capsys.readouterr().err


def test_envs_lists_teams_and_dependencies(capsys, user_package):
    rows = main(["envs", "--json", "--import-module", "user_envs.triage"])
    by_id = {r["id"]: r for r in rows}
    assert (
        by_id["math-dual-v7"]["agents"] == ["reasoner", "actor"]
        and by_id["math-dual-v7"]["dependency"] == "Chain"
    )
    assert by_id["dispatch-v0"]["dependency"] == "Orchestrator"
    assert by_id["triage-v0"]["takes_dataset"] is False
    assert json.loads(capsys.readouterr().out) == rows


def test_every_trainer_and_config_imports_from_the_package():
    import marft_algos

    for name in (
        "GRPOTrainer",
        "GRPOConfig",
        "ActionMARFTTrainer",
        "ActionMARFTConfig",
        "TokenMARFTTrainer",
        "TokenMARFTConfig",
        "PPOTrainer",
        "PPOConfig",
        "Trainer",
        "TrainerConfig",
        "MultiAgentPolicy",
    ):
        assert getattr(marft_algos, name).__name__ == name


def test_exit_status_says_bad_input_or_divergence(capsys):
    from marft_algos.cli.main import guarded
    from marft_algos.runs.folder import TrainingDiverged

    def diverges(argv):
        raise TrainingDiverged("every update was skipped")

    def bad_input(argv):
        raise UsageError("--threads 0: pass --threads 1 or more.")

    with pytest.raises(SystemExit) as diverged:
        guarded(diverges, [], "marft train")
    with pytest.raises(SystemExit) as bad:
        guarded(bad_input, [], "marft train")
    assert (diverged.value.code, bad.value.code) == (1, 2)
    assert "marft train: error: every update was skipped" in capsys.readouterr().err


@pytest.mark.parametrize(("model", "group"), [("marft-tiny-math", 4), ("smollm2-135m-instruct", 8)])
def test_presets_give_rloo_their_group_and_reinforce_pp_one_sample_per_task(model, group):
    _, config_class, rloo, _ = parse_train_args(["--algo", "rloo", "--model", model])
    assert config_class.__name__ == "RLOOConfig" and rloo["num_generations"] == group
    _, config_class, rpp, _ = parse_train_args(["--algo", "reinforce-pp", "--model", model])
    assert config_class.__name__ == "REINFORCEPPConfig" and rpp["num_generations"] == 1
    # Every other preset field applies to both (e.g. the learning rate and passes per batch).
    assert rloo["learning_rate"] == rpp["learning_rate"] and rpp["learning_rate"] != 1e-6
    _, _, chosen, _ = parse_train_args(["--algo", "reinforce-pp", "--num-generations", "4"])
    assert chosen["num_generations"] == 4


# -- bad input that gave a traceback or was accepted (issue 36) ----------------------------------


def test_a_hub_dataset_without_the_datasets_package(monkeypatch):
    import sys

    from marft_algos.cli.main import user_errors
    from marft_envs.math.loaders import DatasetsNotInstalledError

    monkeypatch.setitem(sys.modules, "datasets", None)  # as if not installed
    with pytest.raises(
        DatasetsNotInstalledError,
        match=r"'nosuchuser/nosuchdata' needs the `datasets` package: pip install datasets",
    ):
        train("--dataset", "hf:nosuchuser/nosuchdata", "--model", MISSING_MODEL)
    assert issubclass(DatasetsNotInstalledError, user_errors())  # one line, no traceback


def test_a_folder_that_holds_no_data(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    with pytest.raises(FileNotFoundError, match=r"'.*data' is not a dataset saved by .*no JSONL"):
        train("--dataset", str(folder), "--model", MISSING_MODEL)
    (folder / "train.jsonl").write_text("")
    with pytest.raises(
        FileNotFoundError, match=r"pass one of its data files, e.g. '.*train.jsonl'"
    ):
        train("--dataset", str(folder), "--model", MISSING_MODEL)


def test_env_kwargs_nested_too_deeply(capsys):
    deep = '{"a":' * 5000 + "1" + "}" * 5000
    with pytest.raises(SystemExit) as exit_info:
        train("--env-kwargs", deep, "--model", MISSING_MODEL)
    assert exit_info.value.code == 2
    assert "--env-kwargs" in (err := capsys.readouterr().err) and "nested too deeply" in err


@pytest.mark.parametrize("value", ["NaN", "-1", "0", "Infinity", "true", '"2"'])
def test_a_grading_time_limit_that_is_no_limit(value):
    with pytest.raises(ValueError, match=r"grading_timeout must be a positive, finite number"):
        train("--env-kwargs", f'{{"grading_timeout": {value}}}', "--model", MISSING_MODEL)


def test_code_env_limits_as_json_are_sandbox_limits():
    import marft_envs
    from marft_envs.code.env import _sandbox_limits
    from marft_envs.sandbox.runner import SandboxLimits

    limits = _sandbox_limits({"cpu_seconds": 5})
    assert limits == SandboxLimits(cpu_seconds=5)
    with pytest.raises(ValueError, match=r"unknown field\(s\) \['cpu'\]; SandboxLimits has"):
        marft_envs.make("code-single-v2", limits={"cpu": 5})
    with pytest.raises(ValueError, match=r"SandboxLimits.wall_seconds must be a positive number"):
        _sandbox_limits({"wall_seconds": float("nan")})


def test_negative_resample_rounds():
    with pytest.raises(ValueError, match=r"--max-resample-rounds must be >= 0 .*got -1"):
        train("--algo", "grpo", "--max-resample-rounds", "-1", "--model", MISSING_MODEL)


def test_tool_math_refuses_to_start_where_the_sandbox_cannot_run(monkeypatch):
    import marft_envs
    from marft_algos.cli.main import user_errors
    from marft_envs.tools import calls

    failed = calls.ToolResult(False, "Error: sandbox_error: unshare: Operation not permitted")
    monkeypatch.setattr(calls, "run_expression", lambda expression, sandbox=None: failed)
    monkeypatch.setattr(calls, "_WORKING", set())
    with pytest.raises(
        calls.ToolSandboxError, match=r"cannot run Python .*Operation not permitted"
    ):
        marft_envs.make("tool-math-single-v7")
    assert issubclass(calls.ToolSandboxError, user_errors())
