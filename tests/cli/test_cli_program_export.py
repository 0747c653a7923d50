"""``marft export --merge`` of an agent program's run: run_team.py replays a logged held-out
episode call by call, each with the messages the program sent, and prints the logged replies word
for word (issue 46: it said the run logged no held-out transcript)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from budgets import TINY

import marft_envs
from marft_algos.cli.main import main

TASKS = [f"Task {i}: name a colour." for i in range(20)]


def plan_then_write(task, client):
    plan = client.chat.completions.create(
        model="planner",
        messages=[
            {"role": "system", "content": "Plan in one line."},
            {"role": "user", "content": task},
        ],
    )
    client.chat.completions.create(
        model="writer",
        messages=[{"role": "user", "content": f"{task}\nPlan: {plan.choices[0].message.content}"}],
    )
    return 1.0


@pytest.fixture
def program_env():
    marft_envs.register_program(
        "export-team-v0", plan_then_write, agents=["planner", "writer"], tasks=TASKS
    )
    yield "export-team-v0"
    marft_envs.registry.pop("export-team-v0", None)


def test_the_export_of_a_program_run_replays_its_held_out_transcript(
    program_env, tiny_path, tmp_path, capsys
):
    run = tmp_path / "run"
    command = ["train", "--env", program_env, "--algo", "grpo", "--model", tiny_path]
    budget = ["--iterations", "1", "--output-dir", str(run), "--no-plot", "--progress", "off"]
    main([*command, *budget, *TINY])
    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    capsys.readouterr()
    main(["export", str(run), "--merge"])
    out = capsys.readouterr().out
    assert "no run_team.py" not in out and "CALLS = [" in out
    replay = subprocess.run(
        [sys.executable, str(run / "export" / "run_team.py")],
        cwd=tmp_path,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert replay.returncode == 0, replay.stderr
    logged = next(s for s in samples if s["iteration"] == 1 and s["episode"] == 0)["turns"]
    assert [t["agent"] for t in logged] == ["planner", "writer"]
    assert replay.stdout == "".join(f"[{t['agent']}]\n{t['action']}\n\n" for t in logged)
