"""The traces tutorial runs as written, in one scratch folder: its code blocks in order (the
``desk_team.py`` block written to that file and imported as a module), and its ``marft``
commands through the command line's ``main``, ``marft serve`` as a user starts it.

How the test maps the page's commands to a fast run: every command runs as written on the
built-in model (the page's default), except that ``marft train`` runs ``--iterations 1`` with
the suite's tiny budget (tests/budgets.py: 6 new tokens, 4 episodes, 4 held-out episodes) and
without a plot or progress bar, and ``marft serve`` binds any free port (``--port 0``), whose URL
replaces the page's ``http://127.0.0.1:8000/v1`` in the client block."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import shlex
import signal
import sys
from pathlib import Path

from budgets import TINY

import marft_envs
from marft_algos.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
TUTORIAL = ROOT / "docs" / "tutorial_traces.md"
MODULE = "desk_team"
PAGE_URL = "http://127.0.0.1:8000/v1"


def _start_serve():
    """tests/cli/serve_process.py's ``start_serve`` (that folder is not on this one's path)."""
    spec = importlib.util.spec_from_file_location(
        "serve_process", ROOT / "tests" / "cli" / "serve_process.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.start_serve


def blocks() -> list[tuple[str, str]]:
    """``(language, text)`` of the page's python and bash blocks, in order."""
    return re.findall(r"```(python|bash)\n(.*?)```", TUTORIAL.read_text(), flags=re.DOTALL)


def _train_argv(argv: list[str]) -> list[str]:
    at = argv.index("--iterations")
    return [
        *argv[:at],
        "--iterations",
        "1",
        *argv[at + 2 :],
        "--no-plot",
        "--progress",
        "off",
        *TINY,
    ]


def test_the_tutorial_runs_from_recorded_calls_to_a_served_team(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    found = blocks()
    assert [language for language, _ in found] == ["python"] * 3 + ["bash"] * 3 + ["python"]
    namespace: dict = {}
    try:
        for _, text in found[:3]:
            if text.startswith(f"# {MODULE}.py\n"):  # the module the next block imports
                (tmp_path / f"{MODULE}.py").write_text(text)
            else:
                exec(compile(text, str(TUTORIAL), "exec"), namespace)
        assert capsys.readouterr().out.strip() == "9 1 7 2"
        assert namespace["tasks"].summary.duplicates == 1

        sft, train, serve = (shlex.split(text.strip()) for _, text in found[3:6])
        assert sft[:2] == ["marft", "sft"] and train[:2] == ["marft", "train"]
        out = main(sft[1:])
        assert out["counts"]["episodes_read"] == 10 and out["counts"]["episodes_kept"] == 8
        assert out["counts"]["examples"] == 16  # each kept episode: one reply of each agent
        sft_config = json.loads((tmp_path / "runs" / "desk-sft" / "config.json").read_text())
        assert sft_config["run"]["agents"] == ["router", "solver"]

        main(_train_argv(train[1:]))
        record = json.loads(
            (tmp_path / "runs" / "desk-rl" / "metrics.jsonl").read_text().splitlines()[-1]
        )
        assert record["rollout/calls/router"] == 1.0 and "eval/reward/success" in record
        config = (tmp_path / "runs" / "desk-rl" / "config.json").read_text()
        assert json.loads(config)["run"]["init_from"] == "runs/desk-sft"
        assert "Please compute" not in config  # the run holds the tasks' count, not their text

        assert serve == ["marft", "serve", "runs/desk-rl", "--port", "8000"]
        args = [*serve[2:-1], "0"]
        path = os.pathsep.join([str(tmp_path), str(ROOT)])
        process, url = _start_serve()(args, env={"PYTHONPATH": path})
        try:
            client_block = found[6][1]
            assert PAGE_URL in client_block
            exec(compile(client_block.replace(PAGE_URL, url), str(TUTORIAL), "exec"), namespace)
            printed = capsys.readouterr().out.strip().splitlines()[-1]
            parts = ast.literal_eval(printed)  # the one episode's reward parts
            assert set(parts) == {"routed", "success"}
            process.send_signal(signal.SIGTERM)
            assert process.wait(30) == 0, process.stderr.read()
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(10)
    finally:
        marft_envs.registry.pop("desk-v0", None)
        sys.modules.pop(MODULE, None)
