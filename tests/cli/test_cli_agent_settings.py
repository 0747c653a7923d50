"""Per-agent training settings from the command line and from --config files: a learning rate per
agent (name=value pairs or JSON), the agent schedule (one argument per window), per-agent
advantage normalisation."""

from __future__ import annotations

import pytest

from marft_algos.cli.parsing import UsageError
from marft_algos.cli.train import parse_train_args
from marft_algos.trainers.action_marft import ActionMARFTConfig
from marft_algos.trainers.rloo import RLOOConfig


def _config(tmp_path, text: str) -> list[str]:
    path = tmp_path / "run.yaml"
    path.write_text(text)
    return ["--config", str(path)]


@pytest.mark.parametrize(
    "value",
    [
        "router=1e-5,actor=1e-6",
        '{"router": 1e-5, "actor": 1e-6}',
        "{'router': 1e-5, 'actor': 1e-6}",
    ],
)
def test_learning_rates_per_agent_from_flags(value):
    _, _, values, given = parse_train_args(["--agent-learning-rates", value])
    assert values["agent_learning_rates"] == {"router": 1e-5, "actor": 1e-6}
    assert "agent_learning_rates" in given
    config = ActionMARFTConfig(**{k: values[k] for k in ("agent_learning_rates",)})
    assert config.agent_learning_rates == {"router": 1e-5, "actor": 1e-6}


def test_a_schedule_from_flags_one_argument_per_window():
    argv = ["--agent-schedule", "router", "specialist,reviewer", "--schedule-period", "3"]
    _, _, values, _ = parse_train_args(argv)
    assert values["agent_schedule"] == [["router"], ["specialist", "reviewer"]]
    assert values["schedule_period"] == 3


def test_per_agent_settings_from_a_config_file(tmp_path):
    # YAML reads 1e-5 (no dot) as text: it converts as the flag would.
    text = (
        "agent_learning_rates: {router: 1e-5, actor: 0}\n"
        "agent_schedule: [[router], [specialist, reviewer]]\n"
        "schedule_period: 2\n"
        "normalize_advantages_per_agent: true\n"
    )
    _, _, values, _ = parse_train_args(_config(tmp_path, text))
    assert values["agent_learning_rates"] == {"router": 1e-5, "actor": 0.0}
    assert isinstance(values["agent_learning_rates"]["actor"], float)
    assert values["agent_schedule"] == [["router"], ["specialist", "reviewer"]]
    assert values["normalize_advantages_per_agent"] is True


def test_a_config_file_window_may_be_written_as_names_joined_by_commas(tmp_path):
    _, _, values, _ = parse_train_args(_config(tmp_path, "agent_schedule: [router, 'a,b']\n"))
    assert values["agent_schedule"] == [["router"], ["a", "b"]]


def test_a_bad_learning_rate_in_a_config_file_names_the_field(tmp_path):
    with pytest.raises(UsageError, match=r"agent_learning_rates: .* a number"):
        parse_train_args(_config(tmp_path, "agent_learning_rates: {router: fast}\n"))


def test_a_value_that_is_no_mapping_says_both_spellings(capsys):
    with pytest.raises(SystemExit):
        parse_train_args(["--agent-learning-rates", "router"])
    err = capsys.readouterr().err
    assert "name=value pairs, e.g. actor=8,writer=16" in err


def test_rloo_takes_per_agent_normalisation_from_its_flag():
    _, klass, values, _ = parse_train_args(
        ["--algo", "rloo", "--normalize-advantages", "--normalize-advantages-per-agent"]
    )
    assert klass is RLOOConfig
    assert values["normalize_advantages"] and values["normalize_advantages_per_agent"]
