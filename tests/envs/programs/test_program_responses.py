"""The Responses API, streaming and unknown routes on the training endpoint: a real ``openai``
client and the OpenAI Agents SDK in its default configuration (``OpenAIResponsesModel``)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

for _package in ("openai", "uvicorn", "starlette", "agents"):
    pytest.importorskip(_package, reason=f"the HTTP transport needs the agents extra ({_package})")

import httpx  # noqa: E402
import openai  # noqa: E402
from test_program_env import play  # noqa: E402

import marft_envs  # noqa: E402
from marft_envs.programs import ProgramEnv  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
AGENTS = ["planner", "solver"]
TOOL = {
    "type": "function",
    "name": "lookup",
    "description": "Look a word up.",
    "parameters": {"type": "object", "properties": {"word": {"type": "string"}}},
}
CALL = '<tool_call>{"name": "lookup", "arguments": {"word": "ok"}}</tool_call>'


@pytest.fixture(scope="module")
def framework_teams():
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        path = ROOT / "examples" / "framework_teams.py"
        spec = importlib.util.spec_from_file_location("framework_teams", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(ROOT / "examples"))


def _episode(env_id, replies):
    """One seeded episode of ``env_id`` answered with ``replies``: each call's agent and
    messages, the env's task and its final info."""
    env = marft_envs.make(env_id)
    replies = iter(replies)
    try:
        seen = play(env, lambda agent, messages: next(replies))
    finally:
        env.close()
    return seen, env.unwrapped.task, env.history[-1].info


def test_the_agents_sdk_default_client_hands_off_and_calls_a_tool(framework_teams):
    handoff = '<tool_call>{"name": "transfer_to_math", "arguments": {}}</tool_call>'
    tool = '<tool_call>{"name": "calculate", "arguments": {"expression": "14 - 9"}}</tool_call>'
    seen, task, info = _episode("helpdesk-responses-v0", [handoff, tool, "\\boxed{(5,9)}"])
    assert task["answer"] == "(5,9)"
    assert [agent for agent, _ in seen] == ["planner", "math", "math"]
    assert "program_error" not in info
    assert info["reward_parts"] == pytest.approx({"success": 1.0, "handoff": 1.0, "cost": -0.06})
    math_first, math_second = seen[1][1], seen[2][1]
    assert math_first[0]["content"].startswith(framework_teams.SPECIALISTS["math"])
    assert '"name": "calculate"' in math_first[0]["content"]  # its function tool, described
    assert math_first[1:] == [
        {"role": "user", "content": task["request"]},
        {"role": "assistant", "content": handoff},
        {"role": "user", "content": '<tool_response>\n{"assistant": "math"}\n</tool_response>'},
    ]
    # the tool's output came back as a function_call_output item, rendered as a tool result
    assert math_second[len(math_first) :] == [
        {"role": "assistant", "content": tool},
        {"role": "user", "content": "<tool_response>\n5\n</tool_response>"},
    ]


def test_a_call_renders_the_same_prompt_through_responses_and_chat_completions(framework_teams):
    """helpdesk-handoff-v0 (chat completions) and helpdesk-responses-v0 (the Responses API) send
    the same triage call: the policy sees the same observation."""
    chat, _, _ = _episode("helpdesk-handoff-v0", ["writer, please"])
    responses, _, _ = _episode("helpdesk-responses-v0", ["writer, please"])
    assert chat[0] == responses[0]


def _openai_program(task, client):
    """Every route a client probes, through the episode's own ``openai`` client."""
    found = {}
    reply = client.responses.create(model="planner", instructions="Route.", input=task)
    found["text"] = reply.output_text == "ok" and reply.status == "completed"
    found["usage"] = reply.usage.output_tokens == 3 and reply.object == "response"
    called = client.responses.create(
        model="solver",
        input=[{"role": "user", "content": [{"type": "input_text", "text": task}]}],
        tools=[TOOL],
    )
    (item,) = called.output
    found["tool"] = item.type == "function_call" and item.name == "lookup"
    back = [
        {"role": "user", "content": task},
        item.model_dump(exclude_none=True),
        {"type": "function_call_output", "call_id": item.call_id, "output": "a word"},
    ]
    events = list(client.responses.create(model="solver", input=back, tools=[TOOL], stream=True))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    found["streamed"] = events[-1].type == "response.completed" and deltas == "ok"
    chunks = client.chat.completions.create(
        model="planner", messages=[{"role": "user", "content": task}], stream=True
    )
    found["chat_streamed"] = "".join(c.choices[0].delta.content or "" for c in chunks) == "ok"
    found["model"] = client.models.retrieve("solver").id == "solver"
    for probe in (
        lambda: client.models.retrieve("critic"),
        lambda: client.completions.create(model="planner", prompt=task),
    ):
        try:
            probe()
        except openai.NotFoundError as err:
            found.setdefault("json_404", True)
            found["json_404"] &= isinstance(err.body, dict) and bool(err.body.get("message"))
    page = httpx.get(f"{client.base_url}nowhere")
    found["unknown_route"] = (
        page.status_code == 404 and page.json()["error"]["code"] == "unknown_url"
    )
    return {name: float(ok) for name, ok in found.items()}


def test_the_training_endpoint_speaks_responses_streams_and_json_errors():
    env = ProgramEnv(_openai_program, AGENTS, ["say ok"], transport="http")
    seen = []

    def reply(agent, messages):
        seen.append(env.observe(agent))
        return CALL if len(seen) == 2 else "ok"

    try:
        play(env, reply)
    finally:
        env.close()
    info = env.history[-1].info
    assert "program_error" not in info
    assert info["reward_parts"] == {
        name: 1.0
        for name in (
            "text",
            "usage",
            "tool",
            "streamed",
            "chat_streamed",
            "model",
            "json_404",
            "unknown_route",
        )
    }
    assert info["calls"] == {"planner": 2, "solver": 2}
    assert seen[0]["messages"] == [
        {"role": "system", "content": "Route."},
        {"role": "user", "content": "say ok"},
    ]
    assert seen[1]["tools"] == [
        {
            "type": "function",
            "function": {k: v for k, v in TOOL.items() if k != "type"},
        }
    ]
    assert seen[2]["messages"][1:] == [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "call_1_0",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": {"word": "ok"}},
                }
            ],
        },
        {"role": "tool", "content": "a word", "tool_call_id": "call_1_0"},
    ]


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"previous_response_id": "resp_1"}, "previous_response_id is not supported"),
        ({"tools": [{"type": "web_search"}]}, "function tools only"),
        ({"input": [{"type": "input_image", "image_url": "x"}]}, "'input_image' item"),
        ({"modalities": ["audio"]}, "unexpected keyword"),
    ],
)
def test_what_the_responses_api_cannot_carry_is_refused_with_what_to_send(body, expected):
    from marft_envs.wire.responses import responses_request

    with pytest.raises((TypeError, ValueError), match=expected):
        responses_request({"model": "planner", "input": "hi", **body})


def test_the_in_process_client_speaks_the_responses_api_too():
    found = {}

    def program(task, client):
        reply = client.responses.create(model="planner", instructions="Route.", input=task)
        found["reply"] = reply
        called = client.responses.create(model="solver", input=task, tools=[TOOL])
        found["call"] = called.output[0]
        try:
            client.responses.create(model="solver", input=task, stream=True)
        except ValueError as err:
            found["stream"] = str(err)
        return float(reply.output_text == "ok")

    env = ProgramEnv(program, AGENTS, ["say ok"])
    try:
        play(env, lambda agent, messages: CALL if agent == "solver" else "ok")
    finally:
        env.close()
    assert "program_error" not in env.history[-1].info
    assert env.history[-1].team_reward == 1.0
    assert found["reply"].usage.output_tokens == 3 and found["reply"].object == "response"
    assert (found["call"].type, found["call"].name) == ("function_call", "lookup")
    assert "transport='http'" in found["stream"]
