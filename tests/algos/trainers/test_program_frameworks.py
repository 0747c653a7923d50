"""Framework teams (LangGraph, OpenAI Agents SDK) trained over the local OpenAI-compatible
endpoint, each agent on its own adapter (examples/framework_teams.py)."""

from __future__ import annotations

import importlib.util
import math
import socket
from pathlib import Path

import pytest

for package in ("openai", "uvicorn", "starlette", "langgraph", "langchain_openai", "agents"):
    pytest.importorskip(package, reason=f"the framework examples need the agents extra ({package})")

from test_trainers import SMALL  # noqa: E402

import marft_envs  # noqa: E402
from marft_algos import ActionMARFTConfig, ActionMARFTTrainer, Critic, MultiAgentPolicy  # noqa: E402
from marft_envs.programs import server  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def framework_teams():
    path = ROOT / "examples" / "framework_teams.py"
    spec = importlib.util.spec_from_file_location("framework_teams", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("env_id", ["helpdesk-langgraph-v0", "helpdesk-agents-sdk-v0"])
def test_a_framework_team_trains_over_the_endpoint(framework_teams, tiny_path, env_id):
    agents = framework_teams.AGENTS
    policy = MultiAgentPolicy.from_pretrained(tiny_path, agents, seed=0)
    config = ActionMARFTConfig(**{**SMALL, "iterations": 1})
    trainer = ActionMARFTTrainer(
        policy,
        lambda: marft_envs.make(env_id),
        config,
        critic=Critic(policy, seed=0),
        eval_env_fn=lambda: marft_envs.make(env_id, split="test"),
    )
    try:
        last = trainer.train()[-1]
        port = server.running_server().port
    finally:
        trainer.close()
    assert math.isfinite(last["train/policy_loss"])
    assert abs(last["train/approx_kl"]) < 1e-3
    assert last["rollout/program_errors"] == 0
    assert last["rollout/calls/planner"] == 1.0 and last["rollout/calls/critic"] == 1.0
    assert last["rollout/reward/cost"] <= -0.06
    with socket.socket() as s:  # the last env closed: no port of ours is left open
        assert s.connect_ex(("127.0.0.1", port)) != 0
