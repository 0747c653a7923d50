"""What a run tells its user: transcripts of held-out episodes (samples.jsonl), accuracies with
their episode count and standard error, a warning when an iteration has nothing to learn from,
and progress (phase, episodes, tokens/s, ETA) as plain lines when not on a terminal."""

from __future__ import annotations

import json
import logging
import math

import pytest
from test_trainers import SMALL, build
from trainer_envs import DigitsEnv

from marft_algos.policy import MultiAgentPolicy
from marft_algos.policy.critic import Critic
from marft_algos.rollout.collector import Episode
from marft_algos.rollout.evaluation import format_accuracy, format_change, summarize_episodes
from marft_algos.runs.progress import TrainingProgress
from marft_algos.trainers.action_marft import ActionMARFTConfig, ActionMARFTTrainer
from marft_algos.trainers.grpo import GRPOConfig, GRPOTrainer
from marft_envs import Transition


class NoRewardEnv(DigitsEnv):
    """Every answer gets 0: no iteration has anything to learn from."""

    def _transition(self, actions):
        return Transition(reward=0.0, terminated=True, info={"correct": False})


def test_samples_jsonl_holds_every_agents_turns_at_each_evaluation(tiny_path, tmp_path):
    trainer = build(
        "action", tiny_path, iterations=2, eval_every=1, eval_samples=2, output_dir=str(tmp_path)
    )
    trainer.train()
    rows = [json.loads(x) for x in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert [(r["iteration"], r["episode"]) for r in rows] == [
        (0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1)
    ]  # fmt: skip
    for row in rows:
        assert [t["agent"] for t in row["turns"]] == ["writer", "answerer"]
        assert isinstance(row["correct"], bool) and isinstance(row["team_return"], float)
        for turn in row["turns"]:
            assert turn["messages"][-1]["role"] == "user" and "Number" in str(turn["messages"])
            assert isinstance(turn["action"], str) and isinstance(turn["reward"], float)
    # The answerer saw what the writer said (the chain), as the transcript records it.
    writer, answerer = rows[0]["turns"]
    said = writer["action"].strip()
    assert not said or any(said in str(m["content"]) for m in answerer["messages"])


def _trainer(kind, tiny_path, env_cls, **overrides):
    policy = MultiAgentPolicy.from_pretrained(tiny_path, ["writer", "answerer"], seed=0)
    env_fn = lambda: env_cls(team=2)  # noqa: E731
    settings = {**SMALL, "iterations": 1, **overrides}
    if kind == "grpo":
        settings.pop("critic_learning_rate")
        return GRPOTrainer(policy, env_fn, GRPOConfig(num_generations=2, **settings))
    config = ActionMARFTConfig(**settings)
    return ActionMARFTTrainer(policy, env_fn, config, critic=Critic(policy, seed=0))


@pytest.mark.parametrize("kind", ["grpo", "action"])
def test_an_iteration_with_nothing_to_learn_from_warns(kind, tiny_path, caplog):
    trainer = _trainer(kind, tiny_path, NoRewardEnv, iterations=2)
    with caplog.at_level(logging.WARNING, logger="marft_algos.trainers.base"):
        records = trainer.train()
    assert records[-1]["rollout/nothing_to_learn"] == 1
    warned = [r.getMessage() for r in caplog.records if "nothing to learn from" in r.getMessage()]
    assert len(warned) == 2
    assert ("zero_std_fraction 1.0" if kind == "grpo" else "got reward 0") in warned[0]
    # The first one says how to give the agents prompts the model follows; later ones do not.
    assert "marft train --profiles FILE" in warned[0] and "system_prompts=" in warned[0]
    assert "--profiles" not in warned[1]


def test_rewards_with_spread_do_not_warn(tiny_path, caplog):
    trainer = _trainer("grpo", tiny_path, DigitsEnv, episodes_per_iteration=8)
    with caplog.at_level(logging.WARNING, logger="marft_algos.trainers.base"):
        records = trainer.train()
    assert records[-1]["rollout/nothing_to_learn"] == 0
    assert not [r for r in caplog.records if "nothing to learn" in r.getMessage()]


def test_accuracy_comes_with_its_episode_count_and_standard_error():
    episodes = [Episode(seed=i, options={}, info={"correct": i < 3}) for i in range(8)]
    metrics = summarize_episodes(episodes, "eval")
    assert metrics["eval/accuracy"] == 0.375 and metrics["eval/episodes"] == 8
    assert metrics["eval/accuracy_se"] == pytest.approx(math.sqrt(0.375 * 0.625 / 8))
    assert format_accuracy(0.375, 8) == "0.375 ± 0.171 (n=8)"
    # The headline: +12.5 points from 8 episodes is within one standard error of nothing.
    assert format_change(0.25, 8, 0.375, 8) == "+12.5 ± 23.0 points"


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_plain_progress_shows_phase_episodes_tokens_per_second_and_eta(caplog):
    clock = FakeClock()
    bar = TrainingProgress("plain", total=4, done=0, slow_phase_s=10, clock=clock)
    with caplog.at_level(logging.INFO, logger="marft_algos.runs.progress"), bar:
        for _ in range(2):
            bar.phase("rollout", 8)
            for _ in range(8):
                clock.now += 5.0  # a slow real model: 5 s and 100 tokens per episode
                bar.episode(100)
            bar.phase("update")
            clock.now += 20.0
            bar.update({"rollout/reward_mean": 0.5, "eval/accuracy": 0.25, "eval/episodes": 8})
    lines = [r.getMessage() for r in caplog.records if r.name == "marft_algos.runs.progress"]
    assert "  rollout 2/8 episodes, 20 tokens/s" in lines
    assert "  rollout done: 8 episodes, 800 tokens in 40s (20 tokens/s)" in lines
    assert "  update done in 20s" in lines
    # 60 s per iteration: after 1 of 4, 3 remain (3m00s); after 2, 2 remain.
    assert lines[-1] == (
        "iteration 2/4 reward_mean=0.500 accuracy=0.250 ± 0.153 (n=8) | rollout 20 tokens/s"
        " | ETA 2m00s"
    )
    assert any(line.endswith("ETA 3m00s") for line in lines)


def test_the_iteration_line_shows_the_rollout_update_split_and_the_prompts_saved(caplog):
    bar = TrainingProgress("plain", total=2, done=0, clock=FakeClock())
    with caplog.at_level(logging.INFO, logger="marft_algos.runs.progress"), bar:
        bar.update(
            {
                "time/rollout_s": 12.0,
                "time/update_s": 75.0,
                "rollout/prefill_tokens": 360,
                "rollout/prefill_tokens_saved": 640,
            }
        )
    (line,) = [r.getMessage() for r in caplog.records if r.message.startswith("iteration")]
    assert "| rollout 12s, update 1m15s | prompts 64% saved |" in line, line


def test_a_batch_from_the_async_worker_counts_its_tokens_over_the_workers_time(caplog):
    from types import SimpleNamespace

    def episode(tokens):
        return SimpleNamespace(decisions=[SimpleNamespace(action_ids=[1] * tokens)])

    clock = FakeClock()
    bar = TrainingProgress("plain", total=2, done=0, slow_phase_s=10, clock=clock)
    with caplog.at_level(logging.INFO, logger="marft_algos.runs.progress"), bar:
        bar.phase("rollout", 4)
        clock.now += 1.0  # the wait for a batch the worker made in 8 s during the last update
        bar.generated_elsewhere([episode(100)] * 4, seconds=8.0)
        bar.phase("update")
        bar.update({"rollout/reward_mean": 0.5})
        bar.phase("rollout", 4)
        clock.now += 4.0  # a batch loaded from a checkpoint: the worker's time is unknown
        bar.generated_elsewhere([episode(10)] * 4, seconds=None)
        bar.phase("update")
        bar.update({"rollout/reward_mean": 0.5})
    lines = [r.getMessage() for r in caplog.records if r.name == "marft_algos.runs.progress"]
    assert "| rollout 50 tokens/s" in lines[0] and "| rollout 10 tokens/s" in lines[1]


def test_the_eta_counts_the_evaluations_still_to_come(caplog):
    # A run of 4 iterations evaluating before training and every 2 iterations: each iteration
    # takes 60 s and each evaluation 30 s (greedy 20 s + sampled 10 s).
    clock = FakeClock()
    bar = TrainingProgress("plain", total=4, done=0, eval_every=2, clock=clock)

    def evaluate():
        bar.phase("eval", 4)
        clock.now += 20.0
        bar.phase("eval (sampled)", 4)
        clock.now += 10.0

    with caplog.at_level(logging.INFO, logger="marft_algos.runs.progress"), bar:
        evaluate()
        bar.update({"eval/accuracy": 0.25}, advance=False)
        for iteration in (1, 2):
            bar.phase("rollout", 8)
            clock.now += 60.0
            if iteration == 2:
                evaluate()
            bar.update({"rollout/reward_mean": 0.5})
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("iteration")]
    # After iteration 1: 3 iterations (180 s) and the evaluations at 2 and 4 (60 s) are left.
    assert lines[1].startswith("iteration 1/4") and lines[1].endswith("ETA 4m00s")
    # After iteration 2 (its evaluation timed too): 2 iterations and one evaluation.
    assert lines[2].startswith("iteration 2/4") and lines[2].endswith("ETA 2m30s")
    assert bar.evaluations_left() == 1


@pytest.fixture
def unconfigured_progress_logger():
    """The progress logger as a script that never configured logging has it (the command line
    sets it to INFO, and earlier tests may have run the command line)."""
    log = logging.getLogger("marft_algos.runs.progress")
    level = log.level
    log.setLevel(logging.NOTSET)  # setLevel, not the attribute: it clears the level cache
    yield
    log.setLevel(level)


def test_progress_true_off_a_terminal_prints_plain_lines_without_logging_setup(
    capsys, unconfigured_progress_logger
):
    # From the Python API (no logging configured) progress=True printed nothing for 56 minutes.
    clock = FakeClock()
    with TrainingProgress(True, total=1, done=0, slow_phase_s=0, clock=clock) as bar:
        bar.phase("rollout", 2)
        clock.now += 1.0
        bar.episode(10)
        bar.update({"rollout/reward_mean": 0.0})
    err = capsys.readouterr().err
    assert "rollout 1/2 episodes, 10 tokens/s" in err and "iteration 1/1" in err


def test_transcripts_reach_tensorboard_as_text(tiny_path, tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    trainer = build(
        "action",
        tiny_path,
        iterations=1,
        eval_samples=1,
        output_dir=str(tmp_path),
        tensorboard=True,
    )
    trainer.train()
    trainer.close()
    events = EventAccumulator(str(tmp_path / "tensorboard"), size_guidance={"tensors": 0})
    events.Reload()
    texts = events.Tensors("eval/samples/text_summary")
    assert [t.step for t in texts] == [0, 1]
    assert "*writer* (reward" in texts[0].tensor_proto.string_val[0].decode()
