"""Failed episodes are left out of the reward means and counted beside them, by kind, in the
metrics, the progress line and the end-of-run table; held-out failures are told and kept as
training failures are."""

from __future__ import annotations

import io
import json
import logging
from types import SimpleNamespace
from typing import NamedTuple

import pytest

from marft_algos.distributed import DistributedContext
from marft_algos.rollout.collector import Episode
from marft_algos.rollout.evaluation import summarize_episodes
from marft_algos.runs.progress import TrainingProgress
from marft_algos.trainers.config import TrainerConfig
from marft_algos.trainers.evaluator import Evaluator
from marft_envs.programs import ProgramEnv


def _finished(reward, correct):
    info = {"calls": {"solo": 1}, "reward_parts": {"success": reward}, "correct": correct}
    return Episode(
        seed=0, options={}, team_return=reward, agent_returns={"solo": reward}, info=info
    )


def _failed(kind, paid=0.0):
    info = {"calls": {"solo": 1}, "program_error": {"type": kind, "message": "m"}}
    return Episode(seed=0, options={}, team_return=paid, agent_returns={"solo": paid}, info=info)


def test_reward_means_leave_failed_episodes_out_and_count_them_by_kind():
    # A team that fails on 3 of 5 tasks, paid error_reward 0 (or even 1) for each failure.
    episodes = [
        _finished(-0.5, False),
        _finished(-0.1, False),
        _failed("Timeout"),
        _failed("ValueError", paid=1.0),
        _failed("Timeout"),
    ]
    m = summarize_episodes(episodes, "eval")
    assert m["eval/reward_mean"] == pytest.approx(-0.3)  # the finished two, not (-0.6 + 1) / 5
    assert m["eval/reward/success"] == pytest.approx(-0.3)
    assert m["eval/episodes"] == 5 and m["eval/episodes_failed"] == pytest.approx(0.6)
    assert m["eval/program_errors"] == 3
    assert m["eval/program_errors/Timeout"] == 2 and m["eval/program_errors/ValueError"] == 1
    assert m["eval/accuracy"] == 0.0  # a failure paid 1 is still not solved
    truncated = Episode(seed=0, options={}, info={"calls": {}, "program_failure": "max_calls"})
    assert summarize_episodes([truncated], "rollout")["rollout/program_errors/max_calls"] == 1
    assert "rollout/reward_mean" not in summarize_episodes([truncated], "rollout")


def test_the_progress_line_shows_the_failures_beside_the_reward_mean(caplog):
    progress = TrainingProgress("plain", total=2, done=0)
    metrics = {
        "rollout/reward_mean": 0.25,
        "rollout/episodes": 64,
        "rollout/program_errors": 12,
        "rollout/program_errors/Timeout": 9,
        "rollout/program_errors/ValueError": 3,
        "eval/episodes": 40,
        "eval/program_errors": 3,
        "eval/program_errors/Timeout": 3,
    }
    with caplog.at_level(logging.INFO):
        progress.update(metrics)
    line = " ".join(r.getMessage() for r in caplog.records) or ""
    if not line:  # logging not set up for INFO: the progress goes to stderr
        pytest.skip("progress went to stderr")
    assert "reward_mean=0.250" in line
    assert "failed: rollout 12 of 64 (Timeout 9, ValueError 3), eval 3 of 40 (Timeout 3)" in line


def test_the_end_of_run_table_has_the_failures_beside_the_reward_mean():
    from rich.console import Console

    from marft_algos.cli.run_report import summarize

    out = io.StringIO()
    console = Console(file=out, width=200)
    record = {
        "iteration": 0,
        "eval/accuracy": 0.5,
        "eval/episodes": 40,
        "eval/reward_mean": -0.15,
        "eval/episodes_failed": 0.075,
        "eval/program_errors": 3,
        "eval/program_errors/Timeout": 3,
    }
    summarize(console, [record], SimpleNamespace(temperature=1.0, output_dir=None))
    text = out.getvalue()
    assert "reward_mean (finished)" in text and "failed" in text
    assert "-0.150" in text and "3 of 40 (Timeout 3)" in text


def test_nothing_to_learn_counts_the_episodes_trained_on_not_those_run(caplog):
    from marft_algos.rollout.collector import Decision
    from marft_algos.trainers.evaluator import flag_no_signal

    def kept():
        decision = Decision(0, 0, 0, "solo", [1], [2], [-0.1], "ok", True, reward=0.0)
        return Episode(seed=0, options={}, decisions=[decision])

    metrics = {"rollout/episodes": 64}  # 12 of the 64 failed and were left out of the update
    with caplog.at_level(logging.WARNING, logger="marft_algos.trainers.base"):
        assert flag_no_signal([kept() for _ in range(52)], metrics, 3, DistributedContext())
    (line,) = [r.getMessage() for r in caplog.records if "nothing to learn" in r.getMessage()]
    assert "all 52 episodes" in line and "64" not in line


class Gen(NamedTuple):
    prompt_ids: list[int]
    action_ids: list[int]
    log_probs: list[float]
    text: str
    finished: bool


class Replies:
    def generate(self, agent, messages_batch, settings, *, generator=None):
        return [Gen([1], [2], [-0.1], "ok", True) for _ in messages_batch]


def _fails_on_odd_tasks(task, client):
    client.chat.completions.create(model="solo", messages=[{"role": "user", "content": "hi"}])
    if task % 2:
        raise ValueError(f"bad task {task}")
    return 1.0


def test_held_out_failures_get_a_console_line_and_transcripts(tmp_path, caplog):
    def env_fn():
        return ProgramEnv(
            _fails_on_odd_tasks,
            ["solo"],
            [0],
            test_tasks=[0, 1, 2, 3],
            split="test",
            max_error_share=1,
        )

    config = TrainerConfig(rollout_threads=2, eval_episodes=4, eval_samples=0)
    evaluator = Evaluator(Replies(), env_fn, config, DistributedContext())
    with caplog.at_level(logging.WARNING, logger="marft_algos.trainers.base"):
        metrics = evaluator.evaluate(0, SimpleNamespace(path=tmp_path), None, lambda *a: None)
    evaluator.collector.close()
    assert metrics["eval/program_errors/ValueError"] == 2 and metrics["eval/reward_mean"] == 1.0
    lines = [r.getMessage() for r in caplog.records if "episodes failed" in r.getMessage()]
    assert len(lines) == 1
    assert (
        "Held-out evaluation (eval) at iteration 0: 2 of 4 episodes failed (ValueError 2)"
        in lines[0]
    )
    assert "program_errors.jsonl" in lines[0]
    rows = [json.loads(line) for line in (tmp_path / "program_errors.jsonl").open()]
    assert [r["split"] for r in rows] == ["eval", "eval"]
    assert {r["info"]["program_error"]["message"] for r in rows} == {"bad task 1", "bad task 3"}
