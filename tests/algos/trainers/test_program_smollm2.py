"""The example teams (a plain function, LangGraph, the OpenAI Agents SDK with and without a
handoff) train 2 iterations on SmolLM2-135M-Instruct with ``marft train``: finite losses, exact
first updates."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.slow


def _load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("example", "env_id"),
    [
        ("program_team", "helpdesk-v0"),
        ("framework_teams", "helpdesk-langgraph-v0"),
        ("framework_teams", "helpdesk-agents-sdk-v0"),
        ("framework_teams", "helpdesk-handoff-v0"),
    ],
)
def test_an_example_team_trains_on_smollm2(smollm2_path, tmp_path, example, env_id):
    if example == "framework_teams":
        for package in (
            "openai",
            "uvicorn",
            "starlette",
            "langgraph",
            "langchain_openai",
            "agents",
        ):
            pytest.importorskip(package, reason=f"needs the agents extra ({package})")
    module = _load(example)
    out = tmp_path / "run"
    module.main(
        [
            "--env",
            env_id,
            "--model",
            "smollm2-135m-instruct",
            "--iterations",
            "2",
            "--episodes-per-iteration",
            "4",
            "--rollout-threads",
            "4",
            "--max-new-tokens",
            "16",
            "--eval-episodes",
            "2",
            "--output-dir",
            str(out),
            "--no-plot",
        ]
    )
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in records if "train/policy_loss" in r]
    assert trained, "no iteration took a policy step"
    assert all(math.isfinite(r["train/policy_loss"]) for r in trained)
    assert abs(trained[0]["train/approx_kl"]) < 1e-3
    assert records[-1]["rollout/program_errors"] == 0
