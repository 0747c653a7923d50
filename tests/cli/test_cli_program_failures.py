"""An agent program that fails a run: ``marft train`` and ``marft eval`` end in one line naming
the failure, its agent and call, and the file of the failed episodes' transcripts, with exit
status 2; ``MARFT_DEBUG=1`` shows the traceback (issue 46)."""

from __future__ import annotations

import json
import re

import pytest
from budgets import TINY

import marft_envs
from marft_algos.cli.main import guarded, main
from marft_algos.cli.program_failures import ProgramFailed
from marft_algos.rollout.collector import ProgramFailures
from marft_algos.trainers.failures import FAILURES_FILE

TASKS = [f"task {i}" for i in range(12)]


def _ask(client, model="solo"):
    return client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}])


def string_reward(task, client):
    _ask(client)
    return "1.0"


def unknown_agent(task, client):
    _ask(client)
    _ask(client, model="nobody")
    return 1.0


def works(task, client):
    _ask(client)
    return 1.0


@pytest.fixture
def program_ids():
    """Registers ids for one test and removes them after."""
    added: list[str] = []

    def register(env_id, program, **kwargs):
        with pytest.warns(UserWarning) if env_id in added else _nothing():
            marft_envs.register_program(env_id, program, agents=["solo"], tasks=TASKS, **kwargs)
        added.append(env_id)

    yield register
    for env_id in added:
        marft_envs.registry.pop(env_id, None)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _train(tiny_path, env_id, run):
    command = ["train", "--env", env_id, "--algo", "grpo", "--model", tiny_path]
    budget = ["--iterations", "1", "--output-dir", str(run), "--no-plot", "--progress", "off"]
    return command + budget + TINY


@pytest.mark.parametrize(
    ("program", "transport", "wanted"),
    [
        (string_reward, "inprocess", "agent 'solo' call 0: TypeError: the program returned '1.0'"),
        (unknown_agent, "inprocess", "UnknownAgentError: model='nobody' is not an agent"),
        (unknown_agent, "http", "NotFoundError: Error code: 404 - model='nobody' is not an agent"),
    ],
)
def test_a_failing_program_ends_training_in_one_line_with_exit_2(
    program, transport, wanted, tiny_path, tmp_path, program_ids, capsys, monkeypatch
):
    monkeypatch.delenv("MARFT_DEBUG", raising=False)
    program_ids("failing-team-v0", program, transport=transport)
    run = tmp_path / "run"
    with pytest.raises(SystemExit) as exit_info:
        guarded(main, _train(tiny_path, "failing-team-v0", run), "marft train")
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and err[1] == "(set MARFT_DEBUG=1 to see the traceback)", err
    line = err[0]
    assert re.match(r"marft train: error: (\d+) of \1 episodes' agent programs failed", line), line
    assert wanted in line and "Traceback" not in line, line
    assert f"transcripts of the failed episodes: {run / FAILURES_FILE}" in line
    rows = [json.loads(r) for r in (run / FAILURES_FILE).read_text().splitlines()]
    assert rows and all(r["stopped_the_run"] and r["info"]["program_error"] for r in rows)
    assert rows[0]["turns"][0]["agent"] == "solo"


def test_marft_debug_shows_the_traceback(tiny_path, tmp_path, program_ids, monkeypatch):
    monkeypatch.setenv("MARFT_DEBUG", "1")
    program_ids("failing-team-v0", unknown_agent)
    with pytest.raises(ProgramFailed) as caught:
        guarded(main, _train(tiny_path, "failing-team-v0", tmp_path / "run"), "marft train")
    assert isinstance(caught.value.__cause__, ProgramFailures)
    assert "Traceback" in str(caught.value.__cause__)


def test_a_failing_program_ends_marft_eval_in_one_line(
    tiny_path, tmp_path, program_ids, capsys, monkeypatch
):
    monkeypatch.delenv("MARFT_DEBUG", raising=False)
    program_ids("flaky-team-v0", works)
    run = tmp_path / "run"
    main(_train(tiny_path, "flaky-team-v0", run))
    program_ids("flaky-team-v0", string_reward)  # the same id, now failing
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        guarded(main, ["eval", str(run), "--no-before"], "marft eval")
    assert exit_info.value.code == 2
    line = capsys.readouterr().err.splitlines()[0]
    assert re.match(r"marft eval: error: (\d+) of \1 episodes' agent programs failed", line), line
    assert f"{run / FAILURES_FILE}" in line and (run / FAILURES_FILE).is_file()


HELD_OUT = [f"held {i}" for i in range(8)]


def fails_on_some_held_out_tasks(task, client):
    _ask(client)
    n = int(task.split()[1])
    if n % 4 == 1:
        raise ValueError(f"no ticket {n}")
    if n == 2:
        raise KeyError(n)
    return 1.0


def test_held_out_failures_in_marft_eval_get_the_training_line_and_transcripts(
    tiny_path, tmp_path, program_ids, caplog, capsys
):
    program_ids("flaky-team-v0", works, test_tasks=HELD_OUT)
    run = tmp_path / "run"
    main(_train(tiny_path, "flaky-team-v0", run))
    (run / FAILURES_FILE).unlink(missing_ok=True)
    program_ids("flaky-team-v0", fails_on_some_held_out_tasks, test_tasks=HELD_OUT)
    capsys.readouterr()
    with caplog.at_level("WARNING", logger="marft_algos.trainers.base"):
        metrics = main(["eval", str(run), "--episodes", "8"])
    lines = [r.getMessage() for r in caplog.records if "episodes failed" in r.getMessage()]
    assert len(lines) == 2, lines  # the tuned team's and the untuned team's, one line each
    for line, split in zip(lines, ["eval", "before"], strict=True):
        assert f"({split}): 3 of 8 episodes failed (ValueError 2, KeyError 1)" in line, line
        assert f"Transcripts: {run / FAILURES_FILE}" in line, line
    rows = [json.loads(r) for r in (run / FAILURES_FILE).read_text().splitlines()]
    assert [(r["split"], r["options"]["index"]) for r in rows] == [
        (split, i) for split in ("eval", "before") for i in (1, 2, 5)
    ]
    assert all(r["command"] == "marft eval" and r["checkpoint"] == "checkpoint-1" for r in rows)
    assert rows[0]["info"]["program_error"]["type"] == "ValueError"
    # The reward mean is over the finished episodes, the failed share beside it.
    assert metrics["eval/reward_mean"] == 1.0 and metrics["eval/episodes_failed"] == 3 / 8
    assert metrics["before/program_errors/KeyError"] == 1
    out = " ".join(capsys.readouterr().out.split())
    assert "tuned: reward mean 1.000 over 5 finished episodes; 3 of 8 failed" in out, out


def test_a_failure_before_the_first_call_is_named_so_not_as_agent_none(tmp_path):
    from marft_algos.cli.program_failures import describe
    from marft_algos.rollout.collector import RolloutCollector
    from marft_envs.programs import ProgramEnv

    def fails_at_once(task, client):
        raise RuntimeError("no database")

    class Replies:
        def generate(self, agent, messages_batch, settings, *, generator=None):
            raise AssertionError("no call is made")

    envs = [ProgramEnv(fails_at_once, ["planner"], ["t"], max_error_share=0.5)]
    collector = RolloutCollector(Replies(), envs)
    with pytest.raises(ProgramFailures) as caught:
        collector.collect(2)
    collector.close()
    for text in (str(caught.value).splitlines()[0], describe(caught.value, None)):
        assert "before its first model call" in text
        assert "None" not in text
