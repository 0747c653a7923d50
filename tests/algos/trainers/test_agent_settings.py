"""Per-agent training settings on the tiny model: a learning rate per agent, agents trained in
turns (frozen agents keep their weights and Adam state; resume keeps the window), per-agent
advantage normalisation in RLOO, and seeded runs that repeat exactly."""

from __future__ import annotations

import math

import pytest
import torch
from test_trainers import adapter_params, build, changed, unchanged

from marft_algos.policy import AgentSpec
from marft_algos.trainers.action_marft import ActionMARFTConfig

SHARED = {"writer": AgentSpec(adapter="team"), "answerer": AgentSpec(adapter="team")}


def _largest_move(before, after):
    return max(float((after[n] - before[n]).abs().max()) for n in before)


def test_a_zero_learning_rate_keeps_one_agent_while_the_other_trains(tiny_path):
    trainer = build("action", tiny_path, iterations=1, agent_learning_rates={"writer": 0.0})
    writer, answerer = adapter_params(trainer, "writer"), adapter_params(trainer, "answerer")
    record = trainer.train()[-1]
    assert unchanged(writer, adapter_params(trainer, "writer"))
    assert changed(answerer, adapter_params(trainer, "answerer"))
    assert record["train/learning_rate/writer"] == 0.0
    assert record["train/learning_rate/answerer"] == 5e-3  # the global learning_rate


@pytest.mark.parametrize("kind", ["action", "grpo"])
def test_adams_first_step_moves_each_agent_by_its_own_learning_rate(kind, tiny_path):
    # Adam's first step is lr · g / (|g| + eps) per weight: about lr wherever |g| >> eps.
    rates = {"writer": 1e-3, "answerer": 4e-3}
    trainer = build(kind, tiny_path, iterations=1, agent_learning_rates=rates, adam_eps=1e-12)
    before = {a: adapter_params(trainer, a) for a in rates}
    trainer.train()
    for agent, lr in rates.items():
        move = _largest_move(before[agent], adapter_params(trainer, agent))
        assert math.isclose(move, lr, rel_tol=1e-3), (agent, move, lr)


def test_agents_sharing_an_adapter_must_share_a_learning_rate(tiny_path):
    with pytest.raises(
        ValueError, match=r"share one adapter.*writer=0.001, answerer=0.005 \(learning_rate\)"
    ):
        build("action", tiny_path, specs=SHARED, agent_learning_rates={"writer": 1e-3})
    trainer = build(
        "action", tiny_path, specs=SHARED, agent_learning_rates={"writer": 1e-3, "answerer": 1e-3}
    )
    assert trainer.optimizers["writer"].param_groups[0]["lr"] == 1e-3


def test_unknown_agents_are_refused_naming_the_known_ones(tiny_path):
    with pytest.raises(
        ValueError,
        match=r"agent_learning_rates names agent\(s\) \['wirter'\].*'writer', 'answerer'",
    ):
        build("action", tiny_path, agent_learning_rates={"wirter": 1e-3})
    with pytest.raises(ValueError, match=r"agent_schedule names agent\(s\) \['critic'\]"):
        build("action", tiny_path, agent_schedule=[["writer"], ["critic"]])


def test_a_frozen_agent_or_a_split_shared_adapter_in_a_schedule_is_refused(tiny_path):
    with pytest.raises(ValueError, match=r"\['writer'\] that have no trainable parameters"):
        build(
            "action",
            tiny_path,
            specs={"writer": AgentSpec(trainable=False)},
            agent_schedule=[["writer"], ["answerer"]],
        )
    with pytest.raises(
        ValueError, match=r"share their adapter.*Put all of \['writer', 'answerer'\]"
    ):
        build("action", tiny_path, specs=SHARED, agent_schedule=[["writer"], ["answerer"]])


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"agent_learning_rates": {"a": -1.0}}, "must be >= 0"),
        ({"agent_learning_rates": {"a": float("nan")}}, "finite number"),
        ({"agent_schedule": []}, "non-empty list of non-empty lists"),
        ({"agent_schedule": [["a"], []]}, "non-empty list of non-empty lists"),
        ({"schedule_period": 0, "agent_schedule": [["a"]]}, "schedule_period must be >= 1"),
        ({"schedule_period": 3}, "no agent_schedule is set"),
        ({"agent_schedule": [["a"]], "agent_by_agent_interval": 2}, "two spellings of one setting"),
    ],
)
def test_malformed_settings_are_refused_when_the_config_is_built(settings, message):
    with pytest.raises(ValueError, match=message):
        ActionMARFTConfig(**settings)


@pytest.mark.parametrize("kind", ["action", "grpo"])
def test_agents_train_in_turns_and_a_frozen_agent_keeps_its_adam_state(kind, tiny_path):
    trainer = build(
        kind, tiny_path, iterations=2, agent_schedule=[["writer"], ["answerer"]], schedule_period=2
    )
    writer, answerer = adapter_params(trainer, "writer"), adapter_params(trainer, "answerer")
    records = trainer.train()
    assert [r["train/agents"] for r in records if "train/agents" in r] == ["writer", "writer"]
    assert [r["train/learning_rate/answerer"] for r in records if "train/agents" in r] == [0.0, 0.0]
    assert changed(writer, adapter_params(trainer, "writer"))
    assert unchanged(answerer, adapter_params(trainer, "answerer"))
    assert not trainer.optimizers["answerer"].state  # Adam never stepped it
    writer = adapter_params(trainer, "writer")
    writer_state = {
        k: {n: v.clone() for n, v in s.items()}
        for k, s in trainer.optimizers["writer"].state.items()
    }
    trainer.config.iterations = 4
    records = trainer.train()
    assert [r["train/agents"] for r in records if "train/agents" in r] == ["answerer", "answerer"]
    assert unchanged(writer, adapter_params(trainer, "writer"))
    assert changed(answerer, adapter_params(trainer, "answerer"))
    state = trainer.optimizers["writer"].state
    assert state.keys() == writer_state.keys()
    for key, saved in writer_state.items():
        assert all(torch.equal(state[key][n], v) for n, v in saved.items())  # step, exp_avg, ...


def test_agent_by_agent_interval_is_the_schedule_of_each_agent_alone(tiny_path):
    trainer = build("action", tiny_path, agent_by_agent_interval=3)
    assert trainer.schedule.windows == (("writer",), ("answerer",))
    assert trainer.schedule.period == 3
    assert [trainer.schedule.agents_at(i) for i in (0, 2, 3, 6)] == [
        ["writer"],
        ["writer"],
        ["answerer"],
        ["writer"],
    ]


def test_resume_continues_in_the_same_window(tiny_path, tmp_path):
    settings = dict(
        iterations=3,
        seed=1,
        checkpoint_every=1,
        agent_schedule=[["writer"], ["answerer"]],
        schedule_period=2,
        agent_learning_rates={"writer": 2e-3},
    )
    straight = build("grpo", tiny_path, output_dir=str(tmp_path / "a"), **settings)
    straight_agents = [r["train/agents"] for r in straight.train() if "train/agents" in r]
    interrupted = build("grpo", tiny_path, output_dir=str(tmp_path / "b"), **settings)
    interrupted.config.iterations = 1  # stopped after checkpoint-1, inside the writer's window
    interrupted.train()
    resumed = build("grpo", tiny_path, output_dir=str(tmp_path / "b"), **settings)
    resumed.resume()
    assert resumed.agents_to_train() == ["writer"]
    assert resumed.optimizers["writer"].param_groups[0]["lr"] == 2e-3
    resumed_agents = [r["train/agents"] for r in resumed.train() if "train/agents" in r]
    assert straight_agents == ["writer", "writer", "answerer"]
    assert resumed_agents == straight_agents[1:]
    for agent in straight.agents:
        a, b = adapter_params(straight, agent), adapter_params(resumed, agent)
        assert all(torch.allclose(a[n], b[n], atol=1e-6) for n in a), agent


def test_seeded_runs_with_per_agent_settings_repeat_exactly(tiny_path):
    settings = dict(
        seed=4,
        agent_learning_rates={"writer": 1e-3},
        agent_schedule=[["writer", "answerer"], ["answerer"]],
        normalize_advantages_per_agent=True,
    )
    finals = []
    for _ in range(2):
        trainer = build("action", tiny_path, **settings)
        trainer.train()
        finals.append({a: adapter_params(trainer, a) for a in trainer.agents})
    for agent in finals[0]:
        assert unchanged(finals[0][agent], finals[1][agent])


def test_rloo_normalises_each_agents_advantages_over_its_own_samples(tiny_path):
    trainer = build(
        "rloo",
        tiny_path,
        num_generations=2,
        episodes_per_iteration=6,
        beta=0.0,
        normalize_advantages=True,
        normalize_advantages_per_agent=True,
    )
    episodes = trainer.collect()
    batch = trainer.rollout_batch(episodes)
    advantages, _ = trainer.batch_advantages(episodes, batch)
    rewards, groups, index = trainer.batch_samples(episodes, batch)
    # Hand-computed: leave-one-out within (task, agent), then per agent (A − μ) / (s + 1e-4),
    # s the sample std of that agent's samples.
    expected = torch.zeros(len(rewards))
    loo = torch.zeros(len(rewards))
    for s, g in enumerate(groups):
        mates = [float(rewards[j]) for j, h in enumerate(groups) if h == g and j != s]
        loo[s] = float(rewards[s]) - sum(mates) / len(mates)
    for agent in {a for _, a in groups}:
        own = [s for s, (_, a) in enumerate(groups) if a == agent]
        values = [float(loo[s]) for s in own]
        mean = sum(values) / len(values)
        squares = sum((v - mean) ** 2 for v in values)
        if squares == 0:
            continue
        std = math.sqrt(squares / (len(values) - 1))
        for s in own:
            expected[s] = (float(loo[s]) - mean) / (std + 1e-4)
    torch.testing.assert_close(advantages, expected[index])


def test_a_resume_under_changed_learning_rates_steps_with_the_new_ones(tiny_path, tmp_path):
    first = build("grpo", tiny_path, iterations=1, output_dir=str(tmp_path), checkpoint_every=1)
    first.train()
    first.close()
    changed_rates = {"writer": 1e-4}
    resumed = build(
        "grpo",
        tiny_path,
        iterations=2,
        output_dir=str(tmp_path),
        agent_learning_rates=changed_rates,
    )
    resumed.resume(allow_config_change=True)
    assert resumed.optimizers["writer"].param_groups[0]["lr"] == 1e-4
    assert resumed.optimizers["answerer"].param_groups[0]["lr"] == 5e-3
    assert resumed.optimizers["writer"].state  # the saved Adam moments are kept
    record = resumed.train()[-1]
    assert record["train/learning_rate/writer"] == 1e-4
