"""A run records where an agent program's tasks came from, not the tasks: config.json, checkpoints
and marft export hold a file's path and sha256 (an inline list's count and sha256), unless the
registration opts in with record_tasks=True; marft eval and marft train --resume find the tasks
through the registration and refuse, in one line, tasks that changed."""

from __future__ import annotations

import json

import pytest
from budgets import TINY

import marft_envs
from marft_algos.cli.evaluate import _recorded_env_kwargs
from marft_algos.cli.main import main
from marft_algos.cli.parsing import UsageError
from marft_envs.programs.tasks import TaskList, read_tasks

SECRET = "customer ticket"
TASKS = [{"ticket": f"{SECRET} {i}: name a colour."} for i in range(12)]
HELD_OUT = [f"{SECRET} held-out {i}" for i in range(4)]


def answer(task, client):
    client.chat.completions.create(model="solo", messages=[{"role": "user", "content": str(task)}])
    return 1.0


@pytest.fixture
def tickets(tmp_path):
    path = tmp_path / "tickets.jsonl"
    path.write_text("".join(json.dumps(t) + "\n" for t in TASKS))
    yield path
    marft_envs.registry.pop("tickets-v0", None)


def register(path, **kwargs):
    marft_envs.registry.pop("tickets-v0", None)
    marft_envs.register_program(
        "tickets-v0", answer, agents=["solo"], tasks=str(path), test_tasks=HELD_OUT, **kwargs
    )


def train(run, tiny_path, *extra):
    command = ["train", "--env", "tickets-v0", "--algo", "grpo", "--model", tiny_path]
    budget = ["--output-dir", str(run), "--no-plot", "--progress", "off", *TINY]
    main([*command, "--iterations", "1", *budget, *extra])


def test_config_and_export_record_the_task_source_and_eval_finds_the_tasks(
    tickets, tiny_path, tmp_path, capsys
):
    register(tickets)
    run = tmp_path / "run"
    train(run, tiny_path)
    main(["export", str(run)])
    config = (run / "config.json").read_text()
    export = (run / "export" / "marft_export.json").read_text()
    for text in (config, export):
        assert SECRET not in text
    recorded = json.loads(config)["run"]["env"]["kwargs"]
    assert recorded["tasks"]["file"] == str(tickets) and recorded["tasks"]["count"] == 12
    assert len(recorded["tasks"]["sha256"]) == 64
    assert recorded["test_tasks"]["inline"] == 4 and len(recorded["test_tasks"]["sha256"]) == 64
    assert "eval/accuracy" in main(["eval", str(run), "--no-before"])
    train(run, tiny_path, "--resume", "--iterations", "2")  # the same tasks: it resumes

    # The tasks file changed since the run: eval and --resume name it in one line.
    tickets.write_text(tickets.read_text() + json.dumps({"ticket": "new"}) + "\n")
    register(tickets)
    with pytest.raises(
        UsageError, match=r"^tasks changed since the run: .*tickets.jsonl has sha256"
    ):
        main(["eval", str(run), "--no-before"])
    with pytest.raises(UsageError, match=r"tasks changed since the run.*restore the file") as err:
        train(run, tiny_path, "--resume", "--iterations", "3")
    assert "\n" not in str(err.value)


def test_changed_inline_tasks_are_refused_by_eval(tickets, tiny_path, tmp_path):
    register(tickets)
    run = tmp_path / "run"
    train(run, tiny_path)
    marft_envs.registry.pop("tickets-v0")
    marft_envs.register_program(
        "tickets-v0", answer, agents=["solo"], tasks=str(tickets), test_tasks=HELD_OUT[:3]
    )
    with pytest.raises(UsageError, match=r"test_tasks changed since the run: it recorded 4 inline"):
        main(["eval", str(run), "--no-before"])


def test_record_tasks_opts_in_to_the_tasks_themselves(tickets, tiny_path, tmp_path):
    register(tickets, record_tasks=True)
    run = tmp_path / "run"
    train(run, tiny_path)
    main(["export", str(run)])
    recorded = json.loads((run / "config.json").read_text())["run"]["env"]["kwargs"]
    assert recorded["tasks"] == TASKS and recorded["test_tasks"] == HELD_OUT
    assert SECRET in (run / "export" / "marft_export.json").read_text()


def test_an_api_runs_recorded_tasks_are_rebuilt_for_eval(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('"a"\n"b"\n"c"\n')
    file_record = read_tasks(str(path), "tasks").run_record()
    inline = TaskList(["p", "q"]).run_record()
    run = {"env": {"id": "gone-v0", "kwargs": {"tasks": file_record, "split": "test"}}}
    kwargs = _recorded_env_kwargs(run, False, "gone-v0")
    assert kwargs["tasks"] == ["a", "b", "c"] and kwargs["split"] == "test"
    run["env"]["kwargs"]["test_tasks"] = inline
    with pytest.raises(UsageError, match=r"only the count and sha256 of its 2 inline test_tasks"):
        _recorded_env_kwargs(run, False, "gone-v0")
    # A registration that holds the recorded tasks provides them.
    marft_envs.register_program("held-team-v0", answer, agents=["solo"], tasks=["p", "q"])
    run = {"env": {"id": "held-team-v0", "kwargs": {"tasks": inline}}}
    try:
        assert "tasks" not in _recorded_env_kwargs(run, False, "held-team-v0")
    finally:
        marft_envs.registry.pop("held-team-v0")
