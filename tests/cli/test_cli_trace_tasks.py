"""A recorded trace file becomes a task list that trains: the tickets that
opentelemetry-instrumentation-openai-v2 recorded (tests/data/traces) are loaded, split, registered
with register_program and trained on for one iteration; the run's own --trace-file, read back
with the same loader, gives the tasks it trained on and each agent's calls."""

from __future__ import annotations

import json
from pathlib import Path

from budgets import TINY

import marft_envs
from marft_algos.cli.main import main
from marft_envs.programs.traces import load_trace_tasks, read_trace_calls, split_trace_tasks

RECORDED = Path(__file__).resolve().parents[1] / "data" / "traces" / "openai_v2_latest.jsonl"
SEEN: list[str] = []


def team(task, client):
    SEEN.append(task)
    route = client.chat.completions.create(
        model="router", messages=[{"role": "user", "content": task}]
    )
    client.chat.completions.create(
        model="solver",
        messages=[
            {"role": "system", "content": f"Desk: {route.choices[0].message.content}"},
            {"role": "user", "content": task},
        ],
    )
    return 1.0


def test_recorded_traces_train_and_the_run_trace_reads_back(tiny_path, tmp_path):
    tasks = load_trace_tasks(RECORDED, task="root:app.ticket")
    assert len(tasks) == 3 and tasks.summary.duplicates == 1
    train, test = split_trace_tasks(tasks, test_size=1, seed=0)
    marft_envs.register_program(
        "traced-desk-v0", team, agents=["router", "solver"], tasks=train, test_tasks=test
    )
    run, trace_file = tmp_path / "run", tmp_path / "spans.jsonl"
    SEEN.clear()
    try:
        main([
            "train", "--env", "traced-desk-v0", "--algo", "grpo", "--model", tiny_path,
            "--iterations", "1", "--output-dir", str(run), "--no-plot", "--progress", "off",
            "--trace-file", str(trace_file), "--trace-content", *TINY,
        ])  # fmt: skip
    finally:
        marft_envs.registry.pop("traced-desk-v0")
    assert SEEN and set(SEEN) <= set(tasks)
    assert set(SEEN) & set(train) and set(test) <= set(SEEN)  # trained on, evaluated on
    # The run records the tasks' count and sha256; the ticket text stays with the user.
    config = (run / "config.json").read_text()
    assert json.loads(config)["run"]["env"]["kwargs"]["tasks"]["inline"] == len(train)
    assert not any(ticket in config for ticket in tasks)

    # marft's own trace file, read back: one trace per episode, the first user message its task.
    back = load_trace_tasks(trace_file)
    assert set(back) == set(SEEN)
    episodes = read_trace_calls(trace_file)
    assert len(episodes) == len(SEEN)  # every episode the program ran, training and held out
    for episode in episodes:
        assert [c.agent for c in episode.calls] == ["router", "solver"]
        router, solver = episode.calls
        assert router.messages == [{"role": "user", "content": router.messages[0]["content"]}]
        assert solver.messages[0] == {"role": "system", "content": f"Desk: {router.reply}"}
