"""Agent programs over the OpenAI-compatible endpoint: a real ``openai`` client per episode."""

from __future__ import annotations

import socket

import pytest

pytest.importorskip("openai", reason="the HTTP transport needs the agents extra (openai)")
pytest.importorskip("uvicorn", reason="the HTTP transport needs the agents extra (uvicorn)")
pytest.importorskip("starlette", reason="the HTTP transport needs the agents extra (starlette)")

import openai
from test_program_env import calls_an_unknown_agent, play

from marft_envs.programs import ProgramEnv
from marft_envs.programs import server as server_module

AGENTS = ["planner", "solver"]


def team(task, client):
    assert isinstance(client, openai.OpenAI)
    models = sorted(m.id for m in client.models.list())
    route = client.chat.completions.create(
        model="planner",
        messages=[{"role": "system", "content": "Route."}, {"role": "user", "content": task}],
        temperature=0.7,
        max_tokens=50,
    )
    answer = client.chat.completions.create(
        model="solver",
        messages=[{"role": "user", "content": f"{task}\n{route.choices[0].message.content}"}],
    )
    text = answer.choices[0].message.content
    return {
        "success": float(text == "ok"),
        "cost": -0.1 * sum(client.counts.calls.values()),
        "agents_listed": float(models == sorted(AGENTS)),
    }


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_a_program_over_http_is_the_same_env_as_in_process():
    env = ProgramEnv(team, AGENTS, ["task a", "task b"], transport="http")
    seen = play(env, lambda agent, messages: "ok")
    assert [a for a, _ in seen] == ["planner", "solver"]
    assert seen[0][1] == [
        {"role": "system", "content": "Route."},
        {"role": "user", "content": env.task},
    ]
    info = env.history[-1].info
    assert info["reward_parts"] == pytest.approx(
        {"success": 1.0, "cost": -0.2, "agents_listed": 1.0}
    )
    assert info["calls"] == {"planner": 1, "solver": 1}
    assert info["completion_tokens"] == {"planner": 3, "solver": 3}
    port = server_module.running_server().port
    assert _listening(port)
    env.close()
    assert not _listening(port)  # the last env using it stopped the endpoint


def test_an_unknown_model_gets_404_naming_the_agents():
    caught = {}
    env = ProgramEnv(
        calls_an_unknown_agent(openai.NotFoundError, caught), AGENTS, ["t"], transport="http"
    )
    try:
        play(env, lambda agent, messages: "x")
    finally:
        env.close()
    assert caught["error"].status_code == 404
    assert "planner" in str(caught["error"]) and "'mathh'" in str(caught["error"])


def test_concurrent_episodes_never_mix():
    envs = [ProgramEnv(team, AGENTS, [f"task {i}"], transport="http") for i in range(3)]
    try:
        for i, env in enumerate(envs):
            env.reset(seed=i)
        # Step them interleaved: each env answers its own pending call only.
        for _ in range(2):
            for i, env in enumerate(envs):
                agent = env.agent_selection
                assert env.observe(agent)["messages"][-1]["content"].startswith(f"task {i}")
                env.step("ok")
        assert all(env.history[-1].info["reward_parts"]["success"] == 1.0 for env in envs)
    finally:
        for env in envs:
            env.close()
    assert server_module.running_server() is None


def test_tool_calls_over_http_reach_the_openai_client_as_its_own_objects():
    from test_program_tools import CALL, WEATHER, tool_loop

    seen = []

    def program(task, client):
        assert isinstance(client, openai.OpenAI)
        return tool_loop(task, client)

    env = ProgramEnv(program, ["assistant"], ["Weather in Oslo?"] * 3, transport="http")
    replies = iter(["Let me look.\n" + CALL, "It is sunny."])

    def reply(agent, messages):
        seen.append(env.observe(agent))
        return next(replies)

    play(env, reply)
    assert seen[0]["tools"] == [WEATHER]
    assistant, result = seen[1]["messages"][2:4]
    assert assistant["tool_calls"][0]["function"] == {
        "name": "weather",
        "arguments": {"city": "Oslo"},
    }
    assert assistant["content"] == "Let me look."
    assert result == {"role": "tool", "content": "Oslo: sunny", "tool_call_id": "call_0_0"}
    assert env.history[-1].info["reward_parts"] == {"success": 1.0, "finish": 1.0}
    env.close()
