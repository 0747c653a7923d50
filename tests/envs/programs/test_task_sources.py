"""TaskList: what a run records of a program's tasks (their source and sha256), and the tasks
found again from a record (marft_envs.programs.tasks)."""

from __future__ import annotations

import json

import pytest

import marft_envs
from marft_envs.programs.tasks import TaskList, read_tasks, task_source_problem, tasks_from_record


def solo(task, client):
    return 1.0


def test_a_file_is_recorded_by_path_and_sha256_and_read_again(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps(["a", "b"]))
    tasks = read_tasks(str(path), "tasks")
    record = tasks.run_record()
    assert record["file"] == str(path) and record["count"] == 2 and len(record["sha256"]) == 64
    assert tasks_from_record(record, "tasks") == ["a", "b"]
    path.write_text(json.dumps(["a", "c"]))
    with pytest.raises(ValueError, match=r"^tasks changed since the run: .*t.json has sha256"):
        tasks_from_record(record, "tasks")
    path.unlink()
    with pytest.raises(ValueError, match=r"^the run's tasks file .*t.json is missing"):
        tasks_from_record(record, "tasks")


def test_an_inline_list_is_recorded_by_count_and_sha256():
    record = TaskList(["x", "y", "z"]).run_record()
    assert set(record) == {"inline", "sha256"} and record["inline"] == 3
    assert TaskList(["x", "y", "z"]).run_record() == record
    assert TaskList(["x", "y", "Z"]).run_record() != record
    assert TaskList(["x"], record_rows=True).run_record() == ["x"]
    with pytest.raises(ValueError, match=r"recorded only the count and sha256 of its 3 inline"):
        tasks_from_record(record, "tasks")


def test_task_source_problem_names_what_changed():
    before = {"tasks": TaskList(["a"]).run_record(), "test_tasks": None}
    assert task_source_problem(before, dict(before)) is None
    now = {"tasks": TaskList(["b"]).run_record()}
    assert task_source_problem(before, now).startswith("tasks changed since the run: it recorded")
    # A run that recorded the rows themselves, or a function, is not checked here.
    assert task_source_problem({"tasks": ["a"]}, now) is None


def test_a_spec_records_no_task_of_a_registered_program():
    spec = marft_envs.register_program(
        "quiet-team-v0", solo, agents=["solo"], tasks=["secret 1", "secret 2"]
    )
    try:
        env = marft_envs.make("quiet-team-v0", split="train")
        for record in (spec.to_json(), env.unwrapped.spec.to_json()):
            assert "secret" not in json.dumps(record)
    finally:
        marft_envs.registry.pop("quiet-team-v0")
