"""Prompts travel: ``--profiles FILE`` sets agents' system prompts and the message layout of the
train and held-out envs; the run records them; ``marft export`` writes them with the generation
settings into marft_export.json, and its run_team.py, in plain transformers, replays a logged
held-out episode word for word; the export prints no third-party warning."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from budgets import TINY

from marft_algos.cli.main import main
from marft_algos.cli.parsing import UsageError
from marft_algos.cli.profiles import load_profiles, with_profiles

ROOT = Path(__file__).resolve().parents[2]
ACTOR = "Give only the final answer, in \\boxed{}."


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "marft_algos.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_profiles_reach_the_run_the_export_and_a_plain_transformers_replay(tiny_path, tmp_path):
    profiles = tmp_path / "prompts.yaml"
    profiles.write_text(f"message_layout: user\nsystem_prompts:\n  actor: '{ACTOR}'\n")
    run = tmp_path / "run"
    main(
        [
            "train",
            "--output-dir",
            str(run),
            "--model",
            tiny_path,
            "--iterations",
            "1",
            "--profiles",
            str(profiles),
            *TINY,
            "--no-plot",
            "--progress",
            "off",
        ]
    )
    recorded = json.loads((run / "config.json").read_text())["run"]
    assert recorded["env_kwargs"] == {"message_layout": "user", "system_prompts": {"actor": ACTOR}}
    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    actor_turn = next(t for t in samples[-1]["turns"] if t["agent"] == "actor")
    assert [m["role"] for m in actor_turn["messages"]] == ["user"]
    assert actor_turn["messages"][0]["content"].startswith(ACTOR + "\n\nProblem:")

    done = run_cli("export", str(run), "--merge", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Warning" not in done.stderr and "warn" not in done.stderr.lower(), done.stderr
    assert "TURNS = [" in done.stdout  # the script, printed ready to copy
    index = json.loads((run / "export" / "marft_export.json").read_text())
    assert index["message_layout"] == "user"
    assert index["generation"]["max_new_tokens"] == 6 and index["generation"]["do_sample"]
    assert index["agents"]["actor"]["system_prompt"] == ACTOR
    assert index["agents"]["actor"]["graded"] is True
    assert index["agents"]["reasoner"]["system_prompt"].startswith("You are the Reasoner")
    caps = index["generation"]["max_new_tokens_per_agent"] or {}
    assert index["agents"]["actor"]["max_new_tokens"] == caps.get("actor", 6)

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
    expected = "".join(f"[{t['agent']}]\n{t['action']}\n\n" for t in logged)
    assert replay.stdout == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("system_prompts:\n  actor: [1, 2]\n", "must map agent names to prompt text"),
        ("actor: Solve it.\n", r"has key\(s\) \['actor'\]"),
        ("message_layout: inline\n", "must be 'system' or 'user'"),
        ("", "must hold a mapping"),
    ],
)
def test_a_bad_profiles_file_is_one_clear_error(tmp_path, text, message):
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(UsageError, match=message):
        load_profiles(str(path))


def test_profiles_and_env_kwargs_may_not_set_the_same_key(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("message_layout: user\n")
    assert with_profiles({"max_attempts": 2}, str(path)) == {
        "max_attempts": 2,
        "message_layout": "user",
    }
    with pytest.raises(UsageError, match=r"both set \['message_layout'\]"):
        with_profiles({"message_layout": "system"}, str(path))


def test_unknown_agents_in_profiles_are_refused_before_the_model_loads(tmp_path, capsys):
    path = tmp_path / "p.yaml"
    path.write_text("system_prompts:\n  navigator: Go.\n")
    with pytest.raises(ValueError, match=r"\['navigator'\] that are not in the team"):
        main(["train", "--profiles", str(path), "--output-dir", str(tmp_path / "r")])
    assert not (tmp_path / "r").exists()
