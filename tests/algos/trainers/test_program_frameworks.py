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


@pytest.mark.parametrize(
    "env_id",
    [
        "helpdesk-langgraph-v0",
        "helpdesk-agents-sdk-v0",
        "helpdesk-handoff-v0",
        "helpdesk-responses-v0",  # the Agents SDK's default client: the Responses API
    ],
)
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
    assert last["rollout/calls/planner"] == 1.0
    if env_id in ("helpdesk-handoff-v0", "helpdesk-responses-v0"):  # no hand-off: no review
        assert 0 <= last["rollout/reward/handoff"] <= 1
        assert last["rollout/reward/cost"] <= -0.02
    else:
        assert last["rollout/calls/critic"] == 1.0
        assert last["rollout/reward/cost"] <= -0.06
    with socket.socket() as s:  # the last env closed: no port of ours is left open
        assert s.connect_ex(("127.0.0.1", port)) != 0


def _handoff_episode(replies):
    """One episode of helpdesk-handoff-v0 answered with ``replies``: each call's agent and
    observation, and the episode's final info."""
    env = marft_envs.make("helpdesk-handoff-v0")
    env.reset(seed=0)
    seen, replies = [], iter(replies)
    try:
        while env.agents:
            agent = env.agent_selection
            if env.terminations[agent] or env.truncations[agent]:
                env.step(None)
                continue
            seen.append((agent, env.observe(agent)))
            env.step(next(replies))
    finally:
        env.close()
    return seen, env.history[-1].info


@pytest.mark.parametrize("target", ["math", "writer"])
def test_the_planner_hands_off_with_a_tool_call(framework_teams, target):
    call = f'<tool_call>{{"name": "transfer_to_{target}", "arguments": {{}}}}</tool_call>'
    seen, info = _handoff_episode([call, "\\boxed{7}", "APPROVE"])
    (planner, first), (specialist, second), (critic, _) = seen
    assert (planner, specialist, critic) == ("planner", target, "critic")
    assert "transfer_to_math" in first["messages"][0]["content"]  # tools described in the prompt
    assert second["messages"][0]["content"] == framework_teams.SPECIALISTS[target]
    assert second["messages"][-2:] == [
        {"role": "assistant", "content": call},
        {
            "role": "user",
            "content": f'<tool_response>\n{{"assistant": "{target}"}}\n</tool_response>',
        },
    ]
    assert "program_error" not in info
    assert info["reward_parts"]["handoff"] == 1.0
    assert info["reward_parts"]["cost"] == pytest.approx(-0.06)


@pytest.mark.parametrize(
    "reply",
    [
        "math",  # a route in words: no hand-off
        '<tool_call>{"name": "transfer_to_billing", "arguments": {}}</tool_call>',  # no such agent
        '<tool_call>{"name": transfer_to_math}</tool_call>',  # not JSON
    ],
)
def test_a_failed_handoff_is_a_failed_episode_not_a_program_error(framework_teams, reply):
    seen, info = _handoff_episode([reply])
    assert [agent for agent, _ in seen] == ["planner"]
    assert "program_error" not in info
    assert info["reward_parts"] == {"success": 0.0, "handoff": 0.0, "cost": -0.02}
