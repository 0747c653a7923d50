"""Rough edges of everyday use: no flag abbreviations, "did you mean" for flags, config keys and
model names, typed config files, one-line errors, and no folder left behind by a failed start."""

from __future__ import annotations

from pathlib import Path

import pytest
import tomllib

from marft_algos.cli.main import main, run
from marft_algos.cli.parsing import UsageError
from marft_algos.cli.train import parse_train_args
from marft_algos.policy.config import ModelLoadError

ROOT = Path(__file__).resolve().parents[2]
MISSING_MODEL = "/nonexistent/model-folder"


def _refused(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as exit_info:
        parse_train_args(list(argv))
    assert exit_info.value.code == 2
    return capsys.readouterr().err


def test_a_prefix_of_a_flag_is_not_taken_for_it(capsys):
    # --iteration was silently read as --iterations (argparse abbreviations).
    err = _refused(capsys, "--iteration", "1")
    assert "unrecognized arguments: --iteration (did you mean '--iterations'?)" in err


def test_a_prefix_of_two_spellings_is_one_line_with_a_suggestion(capsys):
    # --episodes printed the usage of every flag, then "ambiguous" between the two spellings.
    err = _refused(capsys, "--episodes", "4")
    assert "did you mean '--episodes-per-iteration'?" in err
    assert "ambiguous" not in err and "usage:" not in err and len(err.splitlines()) == 1


def _config(tmp_path, text: str) -> list[str]:
    path = tmp_path / "run.yaml"
    path.write_text(text)
    return ["--config", str(path)]


def test_a_misspelt_config_key_gets_a_suggestion(tmp_path):
    with pytest.raises(UsageError, match=r"iteration \(unknown \(did you mean 'iterations'\?\)\)"):
        parse_train_args(_config(tmp_path, "iteration: 3\n"))


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("iterations: 1.7", r"iterations: 1.7 \(float\) is not valid; iterations takes a whole"),
        ("iterations: true", r"iterations: True \(bool\) is not valid; iterations takes a whole"),
        ("learning_rate: fast", r"learning_rate: 'fast' \(str\) is not valid; .* a number"),
        ("eval_sampled: 2", r"eval_sampled: 2 \(int\) is not valid; .* true or false"),
        ("algo: ppo\nlevel: word", r"level: 'word' \(str\) is not valid; level takes one of"),
    ],
)
def test_config_values_are_type_checked(tmp_path, line, message):
    with pytest.raises(UsageError, match=message):
        parse_train_args(_config(tmp_path, line + "\n"))


def test_config_values_convert_as_flags_do(tmp_path):
    # YAML reads 1e-3 as text and 3 as an int; the fields want a float.
    _, _, values, _ = parse_train_args(
        _config(tmp_path, "learning_rate: 1e-3\ntemperature: 1\niterations: 3\n")
    )
    assert values["learning_rate"] == 0.001 and values["iterations"] == 3
    assert isinstance(values["temperature"], float)


def test_duplicate_config_keys_are_refused(tmp_path):
    with pytest.raises(UsageError, match=r"sets 'iterations' twice \(lines 1 and 3\)"):
        parse_train_args(_config(tmp_path, "iterations: 2\nseed: 1\niterations: 5\n"))


def test_a_near_miss_of_a_model_short_name(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(ModelLoadError, match=r"did you mean 'smollm2-135m-instruct'\?"):
        main(["train", "--model", "smollm2-135m", "--output-dir", str(out)])
    assert not out.exists()


def test_missing_gguf_converter_is_one_line_and_leaves_no_folder(tmp_path, monkeypatch, capsys):
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "gguf" else real_find_spec(name, *a),
    )
    monkeypatch.setenv("MARFT_CACHE_DIR", str(tmp_path / "empty-cache"))
    model = tmp_path / "model.Q4_1.gguf"
    model.write_bytes(b"GGUF not really")
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as exit_info:
        run(["train", "--model", str(model), "--output-dir", str(out), "--iterations", "1"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert "needs the 'gguf' package" in err and "Traceback" not in err
    # A failed start left a folder holding only .lock.
    assert not out.exists()


def test_the_main_install_brings_the_gguf_converter():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert any(dep.startswith("gguf") for dep in extras["examples"])
    assert '-e ".[examples]"' in (ROOT / "README.md").read_text()


def test_grpo_help_tells_its_inner_passes_from_iterations(capsys):
    with pytest.raises(SystemExit):
        parse_train_args(["--algo", "grpo", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "Not --iterations, which counts rollout-and-update iterations" in help_text


def test_an_existing_folder_is_kept_after_a_failed_start(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    with pytest.raises(ModelLoadError):
        main(["train", "--model", MISSING_MODEL, "--output-dir", str(out)])
    assert out.is_dir()


def test_every_on_off_field_has_a_no_flag(tmp_path):
    # --no-eval-sampled was refused as "an option ... --algo action-marft does not use", while
    # the SmolLM2 preset and config files turn eval_sampled on.
    _, _, values, _ = parse_train_args([])
    assert values["eval_sampled"] is True  # the default model's preset
    _, _, values, given = parse_train_args(["--no-eval-sampled"])
    assert values["eval_sampled"] is False and "eval_sampled" in given
    _, _, values, _ = parse_train_args(
        [*_config(tmp_path, "eval_sampled: true\n"), "--no-eval-sampled"]
    )
    assert values["eval_sampled"] is False
    _, _, values, _ = parse_train_args(["--paper-defaults", "--eval-sampled", "true"])
    assert values["eval_sampled"] is True
