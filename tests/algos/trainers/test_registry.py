"""Adding a trainer: its module plus one register_trainer line makes it buildable and an --algo."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pytest
from trainer_envs import DigitsEnv

from marft_algos.cli.train import parse_train_args
from marft_algos.policy import MultiAgentPolicy
from marft_algos.trainers.config import TrainerConfig
from marft_algos.trainers.registry import ALGORITHMS, build_trainer, register_trainer
from marft_algos.trainers.rloo import RLOOConfig, RLOOTrainer


@dataclass
class ToyConfig(RLOOConfig):
    """RLOO with one setting of its own."""

    toy_scale: float = 1.0
    """A setting only the toy trainer has."""


class ToyTrainer(RLOOTrainer):
    algorithm: ClassVar[str] = "toy-rloo"
    config_class: ClassVar[type[TrainerConfig]] = ToyConfig


@pytest.fixture
def registered():
    register_trainer(ToyTrainer)
    try:
        yield ToyTrainer
    finally:
        ALGORITHMS.pop("toy-rloo")


def test_a_registered_trainer_is_built_by_name(registered, tiny_path):
    policy = MultiAgentPolicy.from_pretrained(tiny_path, ["writer", "answerer"], seed=0)
    config = ToyConfig(
        iterations=1, episodes_per_iteration=4, rollout_threads=2, max_new_tokens=4, toy_scale=2.0
    )
    trainer = build_trainer("toy-rloo", policy, lambda: DigitsEnv(team=2), config)
    assert isinstance(trainer, ToyTrainer) and trainer.critic is None


def test_a_registered_trainer_is_an_algo_choice_with_its_own_flags(registered, capsys):
    args, config_class, values, given = parse_train_args(["--algo", "toy-rloo", "--toy-scale", "3"])
    assert args.algo == "toy-rloo" and config_class is ToyConfig
    assert values["toy_scale"] == 3.0 and "toy_scale" in given
    with pytest.raises(SystemExit):
        parse_train_args(["--algo", "toy-rloo", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "toy-rloo" in help_text and "--toy-scale" in help_text


def test_the_algo_choices_are_the_registry():
    from marft_algos.cli.parsing import build_parser
    from marft_algos.cli.train import TrainArguments

    assert set(ALGORITHMS) == {"action-marft", "token-marft", "ppo", "grpo", "rloo", "reinforce-pp"}
    with pytest.raises(ValueError, match="not a trainer; choose one of"):
        parse_train_args(["--algo", "toy-rloo"])
    assert build_parser([TrainArguments], prog="p", description="d")  # no hand-written list


def test_registering_needs_a_name_of_its_own():
    class Nameless(RLOOTrainer):
        algorithm: ClassVar[str] = "base"

    class Clash(RLOOTrainer):
        algorithm: ClassVar[str] = "grpo"

    with pytest.raises(ValueError, match="no algorithm name of its own"):
        register_trainer(Nameless)
    with pytest.raises(ValueError, match="'grpo' is already GRPOTrainer"):
        register_trainer(Clash)
    assert register_trainer(RLOOTrainer) is RLOOTrainer  # the same class again: a no-op
