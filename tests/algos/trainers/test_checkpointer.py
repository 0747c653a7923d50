"""The Checkpointer on its own: a plain state, weights and optimizers saved and loaded, refusals
before anything changes, the newest checkpoint found, the run folder guarded. No trainer is built."""

from __future__ import annotations

import dataclasses
import json
import logging

import numpy as np
import pytest
import torch
from trainer_envs import DigitsEnv

from marft_algos.distributed import DistributedContext
from marft_algos.policy import Critic, MultiAgentPolicy
from marft_algos.rollout.collector import GenerationSettings, RolloutCollector
from marft_algos.runs.checkpoint import CorruptCheckpointError, read_state
from marft_algos.runs.folder import ConfigMismatchError, RunDirectory, RunExistsError
from marft_algos.trainers.checkpointer import (
    Checkpointer,
    random_states,
    restore_random_states,
)


@dataclasses.dataclass
class Config:
    seed: int = 0
    learning_rate: float = 1e-3
    iterations: int = 4
    overwrite: bool = False

    def to_dict(self):
        return dataclasses.asdict(self)


@pytest.fixture
def parts(tiny_path):
    policy = MultiAgentPolicy.from_pretrained(tiny_path, ["reasoner", "actor"], seed=0)
    critic = Critic(policy, seed=0)
    optimizers = {
        "reasoner": torch.optim.Adam(policy.trainable_parameters("reasoner"), lr=0.1),
        "__critic__": torch.optim.Adam(critic.parameters(), lr=0.1),
    }
    return policy, critic, optimizers


def weights(policy, critic):
    return [
        p.detach().clone() for p in [*policy.trainable_parameters("reasoner"), *critic.parameters()]
    ]


def nudge(policy, critic):
    with torch.no_grad():
        for p in [*policy.trainable_parameters("reasoner"), *critic.parameters()]:
            p.add_(0.5)


STATE = {"algorithm": "toy", "iteration": 3, "config": Config().to_dict(), "run": {"env": "e-v0"}}


def test_save_then_load_restores_weights_and_returns_the_plain_state(parts, tmp_path):
    policy, critic, optimizers = parts
    saved = weights(policy, critic)
    checkpointer = Checkpointer("toy", Config())
    path = checkpointer.save(tmp_path / "checkpoint-3", policy, critic, optimizers, STATE)
    assert read_state(path) == STATE
    assert json.loads((path / "manifest.json").read_text())["run"] == {
        "algorithm": "toy",
        "env": "e-v0",
    }
    nudge(policy, critic)
    state = checkpointer.load(path, policy, critic, optimizers)
    assert state == STATE
    assert all(torch.equal(a, b) for a, b in zip(saved, weights(policy, critic), strict=True))


@pytest.mark.parametrize(
    ("checkpointer", "error", "match"),
    [
        (
            Checkpointer("other", Config()),
            ValueError,
            "written by the 'toy' trainer; this is 'other'",
        ),
        (
            Checkpointer("toy", Config(learning_rate=0.5)),
            ConfigMismatchError,
            r"learning_rate: checkpoint 0.001 vs now 0.5.*--allow-config-change",
        ),
    ],
)
def test_load_refuses_another_algorithm_or_config_before_restoring(
    parts, tmp_path, checkpointer, error, match
):
    policy, critic, optimizers = parts
    path = Checkpointer("toy", Config()).save(tmp_path / "c", policy, critic, optimizers, STATE)
    nudge(policy, critic)
    changed = weights(policy, critic)
    with pytest.raises(error, match=match):
        checkpointer.load(path, policy, critic, optimizers)
    assert all(torch.equal(a, b) for a, b in zip(changed, weights(policy, critic), strict=True))


def test_a_resumable_change_or_an_allowed_one_loads(parts, tmp_path):
    policy, critic, optimizers = parts
    path = Checkpointer("toy", Config()).save(tmp_path / "c", policy, critic, optimizers, STATE)
    Checkpointer("toy", Config(iterations=10)).load(path, policy, critic, optimizers)
    Checkpointer("toy", Config(learning_rate=0.5)).load(
        path, policy, critic, optimizers, allow_config_change=True
    )


def test_a_policy_the_format_does_not_know_is_refused(tmp_path):
    with pytest.raises(TypeError, match="Checkpoints store a MultiAgentPolicy"):
        Checkpointer("toy", Config()).save(tmp_path / "c", object(), None, {}, STATE)


def test_newest_skips_a_damaged_checkpoint_and_says_when_there_is_none(parts, tmp_path, caplog):
    policy, critic, optimizers = parts
    run = RunDirectory(tmp_path / "run")
    checkpointer = Checkpointer("toy", Config(), run)
    assert checkpointer.newest() is None
    assert "No checkpoint in" in caplog.text
    first = checkpointer.save(run.path / "checkpoint-1", policy, critic, optimizers, STATE)
    second = checkpointer.save(run.path / "checkpoint-2", policy, critic, optimizers, STATE)
    assert checkpointer.newest() == second
    (second / "state.json").write_text("{}")
    with caplog.at_level(logging.WARNING):
        assert checkpointer.newest() == first
    (first / "state.json").write_text("{}")
    with pytest.raises(CorruptCheckpointError, match="verifies"):
        checkpointer.newest()
    with pytest.raises(ValueError, match=r"needs a checkpoint directory or config\.output_dir"):
        Checkpointer("toy", Config()).newest()


def test_prepare_writes_the_description_and_refuses_an_earlier_run(tmp_path):
    run = RunDirectory(tmp_path / "run")
    run.acquire()
    Checkpointer("toy", Config(), run).prepare(0, {"algorithm": "toy", "seed": 0})
    assert json.loads(run.config_path.read_text()) == {"algorithm": "toy", "seed": 0}
    with pytest.raises(RunExistsError, match="already holds"):
        Checkpointer("toy", Config(), run).prepare(0, {"algorithm": "toy"})
    resumed = Checkpointer("toy", Config(), run)
    resumed.continuing = True
    resumed.prepare(0, {"algorithm": "toy", "seed": 1})
    Checkpointer("toy", Config(overwrite=True), run).prepare(0, {"algorithm": "toy", "seed": 2})
    assert json.loads(run.config_path.read_text())["seed"] == 2


def test_random_states_round_trip_and_are_plain_json(tiny_path):
    policy = MultiAgentPolicy.from_pretrained(tiny_path, ["reasoner", "actor"], seed=0)

    def collector() -> RolloutCollector:
        return RolloutCollector.from_factory(policy, DigitsEnv, 1, GenerationSettings(), seed=0)

    rng, live, held_out, one = (
        np.random.default_rng(0),
        collector(),
        collector(),
        DistributedContext(),
    )
    state = json.loads(json.dumps(random_states(rng, live, held_out, one)))
    expected = (rng.random(), live.rng.random(), torch.rand(1, generator=live.generator))
    rng.random(), live.rng.random(), torch.rand(1, generator=live.generator)
    restore_random_states(state, rng, live, held_out, one, seed=0, iteration=3)
    assert (rng.random(), live.rng.random(), torch.rand(1, generator=live.generator)) == expected
