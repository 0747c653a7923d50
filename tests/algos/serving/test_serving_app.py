"""The serving endpoint on a scripted policy: the guards (key, size, count, type, host), unknown
models, tool calls parsed and sent back, calls rendered as the program env renders them,
concurrent calls batched, and a server that stops."""

from __future__ import annotations

import json
import socket
import threading
import time

import httpx
import openai
import pytest

from marft_algos.policy.multi_agent import Generation
from marft_algos.protocols import GenerationSettings
from marft_algos.rollout.collector import _prompt
from marft_algos.serving import (
    BackgroundServer,
    Batcher,
    ServedTeam,
    request_settings,
)
from marft_envs.programs import ProgramEnv
from marft_envs.wire import TOOL_PARSERS, RequestLimits

KEY = "test-key"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "transfer_to_math",
            "description": "Hand the request to the math specialist.",
            "parameters": {"type": "object", "properties": {"reason": {"type": "string"}}},
        },
    }
]
CALL = '<tool_call>{"name": "transfer_to_math", "arguments": {"reason": "sum"}}</tool_call>'


class ScriptedPolicy:
    """The policy's serving surface: renders to the observation itself, answers from a script."""

    def __init__(self, agents=("planner", "math"), answer=None, delay=0.0):
        self.agents = list(agents)
        self.seen = []  # (agent, observation) of every rendered call
        self.batches = []  # (agent, batch size, settings) of every generate call
        self.answer = answer or (lambda agent, observation: f"{agent} answers")
        self.delay = delay
        self.lock = threading.Lock()

    def render(self, agent, observation):
        with self.lock:
            self.seen.append((agent, observation))
            return len(self.seen) - 1  # an id the generation looks the observation up by

    def generate_from_ids(self, agent, prompt_ids, settings):
        time.sleep(self.delay)
        self.batches.append((agent, len(prompt_ids), settings))
        out = []
        for ref in prompt_ids:
            text = self.answer(agent, self.seen[ref][1])
            out.append(Generation([1, 2, 3], [4] * 5, [0.0] * 5, text, True, agent))
        return out


def _team(policy=None, tool_prompt=None):
    settings = GenerationSettings(
        max_new_tokens=16, do_sample=False, max_new_tokens_per_agent={"math": 4}
    )
    return ServedTeam(
        policy or ScriptedPolicy(),
        settings,
        TOOL_PARSERS["hermes"],
        tool_prompt=tool_prompt,
        env_id="test-team-v0",
    )


@pytest.fixture
def served():
    """A served scripted team with an API key, stopped on every exit path."""
    policy = ScriptedPolicy(answer=lambda a, o: CALL if a == "planner" else "\\boxed{4}")
    with BackgroundServer(
        _team(policy, "hermes"), api_key=KEY, limits=RequestLimits(4096, 8)
    ) as server:
        yield server, policy


def _post(server, body, **headers):
    headers = {"authorization": f"Bearer {KEY}", "content-type": "application/json", **headers}
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(f"{server.url}/chat/completions", content=data, headers=headers)


HELLO = {"model": "planner", "messages": [{"role": "user", "content": "2 + 2?"}]}


def test_an_unknown_model_is_404_naming_the_agents(served):
    server, _ = served
    client = openai.OpenAI(base_url=server.url, api_key=KEY, max_retries=0)
    with pytest.raises(openai.NotFoundError) as caught:
        client.chat.completions.create(model="critic", messages=HELLO["messages"])
    assert caught.value.body["code"] == "model_not_found"
    assert "['planner', 'math']" in caught.value.body["message"]
    assert [m.id for m in client.models.list().data] == ["planner", "math"]


def test_the_api_key_is_required_on_every_route(served):
    server, _ = served
    client = openai.OpenAI(base_url=server.url, api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as caught:
        client.chat.completions.create(**HELLO)
    assert caught.value.body["code"] == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError):
        client.models.list()
    assert httpx.post(f"{server.url}/chat/completions", json=HELLO).status_code == 401
    assert httpx.get(f"{server.url}/models").status_code == 401
    assert _post(server, HELLO).status_code == 200


def test_bounds_and_request_shape_are_answered_with_a_message(served):
    server, policy = served
    big = {**HELLO, "messages": [{"role": "user", "content": "x" * 5000}]}
    refused = _post(server, big)
    assert refused.status_code == 413 and "4096 bytes" in refused.json()["error"]["message"]

    def chunks():  # no Content-Length: the limit holds while reading
        yield json.dumps(big).encode()

    headers = {"authorization": f"Bearer {KEY}", "content-type": "application/json"}
    streamed = httpx.post(f"{server.url}/chat/completions", content=chunks(), headers=headers)
    assert streamed.status_code == 413
    many = {**HELLO, "messages": [{"role": "user", "content": "hi"}] * 9}
    refused = _post(server, many)
    assert refused.status_code == 400 and "limit of 8" in refused.json()["error"]["message"]
    assert _post(server, b"{not json").status_code == 400
    assert _post(server, HELLO, **{"content-type": "text/plain"}).status_code == 415
    assert _post(server, HELLO, host="evil.example:80").status_code == 421
    assert _post(server, {**HELLO, "n": 2}).status_code == 400  # stream=True is served now
    assert policy.seen == []  # nothing refused reached the model


def test_tool_calls_are_parsed_and_their_results_rendered_as_in_training(served):
    server, policy = served
    client = openai.OpenAI(base_url=server.url, api_key=KEY, max_retries=0)
    messages = [{"role": "system", "content": "Route."}, {"role": "user", "content": "2 + 2?"}]
    reply = client.chat.completions.create(model="planner", messages=messages, tools=TOOLS)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert call.function.name == "transfer_to_math"
    assert json.loads(call.function.arguments) == {"reason": "sum"}
    history = [
        *messages,
        choice.message,
        {"role": "tool", "tool_call_id": call.id, "content": "handed off"},
    ]
    again = client.chat.completions.create(model="planner", messages=history, tools=TOOLS)
    assert again.choices[0].message.tool_calls[0].id != call.id  # unique across calls
    # The same program's calls, as the program env writes them for the policy (tool_prompt).
    env = ProgramEnv(_two_calls(TOOLS), ["planner", "math"], ["2 + 2?"], tool_prompt="hermes")
    expected = _env_observations(env, {"planner": CALL})
    assert [o for _, o in policy.seen] == expected
    assert "<tools>" in expected[0][0]["content"] and "<tool_response>" in str(expected[1])
    plain = client.chat.completions.create(model="math", messages=messages)
    assert plain.choices[0].message.content == "\\boxed{4}"
    assert plain.choices[0].message.tool_calls is None and plain.choices[0].finish_reason == "stop"


def _two_calls(tools):
    """A program calling the planner with tools, then again with the tool result."""

    def program(task, client):
        messages = [{"role": "system", "content": "Route."}, {"role": "user", "content": task}]
        reply = client.chat.completions.create(model="planner", messages=messages, tools=tools)
        call = reply.choices[0].message.tool_calls[0]
        history = [
            *messages,
            reply.choices[0].message,
            {"role": "tool", "tool_call_id": call.id, "content": "handed off"},
        ]
        client.chat.completions.create(model="planner", messages=history, tools=tools)
        return 1.0

    return program


def _env_observations(env, answers):
    """What the collector hands the policy at each call of one episode."""
    env.reset(seed=0)
    seen = []
    while env.agents:
        agent = env.agent_selection
        if env.terminations[agent] or env.truncations[agent]:
            env.step(None)
            continue
        seen.append(_prompt(env.observe(agent)))
        env.step(answers.get(agent, "ok"))
    env.close()
    return seen


def test_without_tool_prompt_the_tools_reach_the_chat_template_as_the_env_gives_them():
    policy = ScriptedPolicy(answer=lambda a, o: CALL)
    team = _team(policy)
    with BackgroundServer(team) as server:
        client = openai.OpenAI(base_url=server.url, api_key="none", max_retries=0)
        messages = [{"role": "system", "content": "Route."}, {"role": "user", "content": "2 + 2?"}]
        reply = client.chat.completions.create(model="planner", messages=messages, tools=TOOLS)
        call = reply.choices[0].message.tool_calls[0]
        history = [*messages, reply.choices[0].message]
        history.append({"role": "tool", "tool_call_id": call.id, "content": "handed off"})
        client.chat.completions.create(model="planner", messages=history, tools=TOOLS)
    env = ProgramEnv(_two_calls(TOOLS), ["planner", "math"], ["2 + 2?"])
    expected = _env_observations(env, {"planner": CALL})
    got = [o for _, o in policy.seen]
    assert got == expected  # tool-call ids too: both number the first call 0
    assert isinstance(got[0], dict) and got[0]["tools"] == TOOLS
    assert isinstance(got[1]["messages"][2]["tool_calls"][0]["function"]["arguments"], dict)


def test_concurrent_calls_of_one_agent_are_generated_in_one_batch():
    policy = ScriptedPolicy(answer=lambda a, o: o[-1]["content"].upper(), delay=0.3)
    with BackgroundServer(_team(policy), max_batch=8) as server:
        client = openai.OpenAI(base_url=server.url, api_key="none", max_retries=0)
        results = {}

        def ask(i):
            reply = client.chat.completions.create(
                model="math", messages=[{"role": "user", "content": f"question {i}"}]
            )
            results[i] = reply.choices[0].message.content

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    assert results == {i: f"QUESTION {i}" for i in range(6)}  # each caller its own reply
    assert sum(size for _, size, _ in policy.batches) == 6
    assert len(policy.batches) < 6  # calls that arrived during a batch went together
    assert {s.tokens_for("math") for _, _, s in policy.batches} == {4}  # the agent's budget


def test_sampling_fields_lower_the_budget_or_ask_for_samples_greedy_otherwise():
    base = _team().settings
    assert request_settings(base, "math", {}) == base
    assert request_settings(base, "math", {"temperature": 0}).do_sample is False
    sampled = request_settings(base, "math", {"temperature": 0.7, "top_p": 0.9, "seed": 3})
    assert (sampled.do_sample, sampled.temperature, sampled.top_p, sampled.seed) == (
        True,
        0.7,
        0.9,
        3,
    )
    assert request_settings(base, "math", {"max_tokens": 2}).tokens_for("math") == 2
    assert request_settings(base, "math", {"max_tokens": 99}).tokens_for("math") == 4
    assert (
        request_settings(base, "planner", {"max_completion_tokens": 3}).tokens_for("planner") == 3
    )
    for bad in ({"temperature": -1}, {"temperature": 1, "top_p": 0}, {"max_tokens": 0}):
        with pytest.raises(ValueError):
            request_settings(base, "math", bad)


def test_the_server_stops_its_thread_port_and_batcher():
    server = BackgroundServer(_team())
    try:
        assert httpx.get(server.url.removesuffix("/v1") + "/health").json() == {"status": "ok"}
    finally:
        server.stop()
    assert not server.running and not server.batcher.running
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", server.port), timeout=2):
        pass


def test_a_batcher_answers_each_caller_with_its_batch_error_and_refuses_after_close():
    def generate(agent, ids, settings):
        raise RuntimeError("out of memory")

    batcher = Batcher(generate)
    try:
        future = batcher.submit("math", [1], GenerationSettings())
        with pytest.raises(RuntimeError, match="out of memory"):
            future.result(10)
    finally:
        batcher.close()
    with pytest.raises(RuntimeError, match="shutting down"):
        batcher.submit("math", [1], GenerationSettings())
