"""``marft serve``'s OpenAI surface beyond chat completions: the Responses API (text, messages,
instructions, function tools and their outputs fed back), ``stream=true`` read by the real
``openai`` client, the OpenAI Agents SDK in its default configuration, ``GET /v1/models/<id>``,
and JSON errors on every unknown route; on a scripted policy and on the built-in tiny model."""

from __future__ import annotations

import asyncio

import httpx
import openai
import pytest
from test_serving_app import CALL, KEY, TOOLS, ScriptedPolicy, _team

from marft_algos.serving import BackgroundServer
from marft_envs.wire import TOOL_PARSERS, RequestLimits

agents_sdk = pytest.importorskip("agents", reason="the Agents SDK test needs openai-agents")

TOOL = {"type": "function", **TOOLS[0]["function"]}  # the same tool, as the Responses API has it
ASK = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2 + 2?"}]


def _answer(agent, observation):
    messages = observation["messages"] if isinstance(observation, dict) else observation
    if agent == "planner" and "<tool_response>" not in messages[-1]["content"]:
        return CALL
    if agent == "math" and "calculate" in messages[0]["content"]:
        last = messages[-1]["content"]
        if last.startswith("<tool_response>") and '"assistant"' not in last:
            return f"the sum is \\boxed{{{last.split()[1]}}}"  # the tool's result
        return '<tool_call>{"name": "calculate", "arguments": {"expression": "2 + 2"}}</tool_call>'
    return "the answer is \\boxed{4}"


@pytest.fixture
def served():
    """A served scripted team (tools described in text), stopped on every exit path."""
    policy = ScriptedPolicy(answer=_answer)
    team = _team(policy, "hermes")
    with BackgroundServer(team, api_key=KEY, limits=RequestLimits(1 << 16, 16)) as server:
        yield server, policy, openai.OpenAI(base_url=server.url, api_key=KEY, max_retries=0)


def test_a_response_is_the_chat_completion_of_the_same_call(served):
    _, policy, client = served
    chat = client.chat.completions.create(model="math", messages=ASK)
    by_messages = client.responses.create(model="math", input=ASK)
    by_instructions = client.responses.create(
        model="math", instructions="Be brief.", input="2 + 2?"
    )
    assert policy.seen[0] == policy.seen[1] == policy.seen[2]  # one observation, three requests
    for response in (by_messages, by_instructions):
        assert response.object == "response" and response.status == "completed"
        assert response.output_text == chat.choices[0].message.content
        (message,) = response.output
        assert message.type == "message" and message.role == "assistant"
        assert message.content[0].type == "output_text"
        assert response.usage.input_tokens == chat.usage.prompt_tokens
        assert response.usage.output_tokens == chat.usage.completion_tokens
        assert response.model == "math" and response.id.startswith("resp_")
    assert by_instructions.instructions == "Be brief."


def test_function_calls_and_their_outputs_round_trip(served):
    _, policy, client = served
    first = client.responses.create(model="planner", input="2 + 2?", tools=[TOOL])
    (call,) = first.output
    assert (call.type, call.name, call.status) == ("function_call", "transfer_to_math", "completed")
    assert call.arguments == '{"reason": "sum"}' and call.call_id
    chat = client.chat.completions.create(model="planner", messages=ASK[1:], tools=TOOLS)
    assert policy.seen[0][1] == policy.seen[1][1]  # the tool rendered as through chat
    assert chat.choices[0].message.tool_calls[0].function.arguments == call.arguments
    history = [
        {"role": "user", "content": "2 + 2?"},
        call.model_dump(exclude_none=True),
        {"type": "function_call_output", "call_id": call.call_id, "output": "handed over"},
    ]
    second = client.responses.create(model="planner", input=history, tools=[TOOL])
    rendered = policy.seen[-1][1]
    assert rendered[-2]["content"] == CALL  # the call, written back as the model wrote it
    assert rendered[-1] == {
        "role": "user",
        "content": "<tool_response>\nhanded over\n</tool_response>",
    }
    assert second.output_text == "the answer is \\boxed{4}"


def test_chat_completions_stream_as_the_openai_client_reads_them(served):
    server, _, client = served
    whole = client.chat.completions.create(model="math", messages=ASK)
    chunks = list(
        client.chat.completions.create(
            model="math", messages=ASK, stream=True, stream_options={"include_usage": True}
        )
    )
    assert {c.object for c in chunks} == {"chat.completion.chunk"}
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content and len(chunks) > 4
    assert chunks[-2].choices[0].finish_reason == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens == whole.usage.total_tokens
    with client.chat.completions.stream(model="planner", messages=ASK, tools=TOOLS) as stream:
        final = stream.get_final_completion()
    (tool_call,) = final.choices[0].message.tool_calls
    assert tool_call.function.name == "transfer_to_math"
    assert final.choices[0].finish_reason == "tool_calls"
    raw = httpx.post(
        f"{server.url}/chat/completions",
        json={"model": "math", "messages": ASK, "stream": True},
        headers={"authorization": f"Bearer {KEY}"},
    )
    assert raw.headers["content-type"].startswith("text/event-stream")
    assert raw.text.rstrip().endswith("data: [DONE]")


def test_responses_stream_as_the_openai_client_reads_them(served):
    _, _, client = served
    events = list(client.responses.create(model="math", input=ASK, stream=True))
    kinds = [e.type for e in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == events[-1].response.output_text == "the answer is \\boxed{4}"
    with client.responses.stream(model="planner", input="2 + 2?", tools=[TOOL]) as stream:
        final = stream.get_final_response()
    (call,) = final.output
    assert (call.type, call.name, call.arguments) == (
        "function_call",
        "transfer_to_math",
        '{"reason": "sum"}',
    )


def test_every_unknown_route_is_a_json_error_and_models_are_listed_one_by_one(served):
    server, _, client = served
    assert client.models.retrieve("planner").id == "planner"
    with pytest.raises(openai.NotFoundError) as caught:
        client.models.retrieve("critic")
    assert caught.value.body["code"] == "model_not_found"
    with pytest.raises(openai.NotFoundError) as caught:
        client.completions.create(model="math", prompt="2 + 2 =")
    assert "not supported" in caught.value.body["message"]
    assert "chat/completions" in caught.value.body["message"]
    headers = {"authorization": f"Bearer {KEY}"}
    for method, path, status in [
        ("POST", "/embeddings", 404),
        ("GET", "/nowhere/at/all", 404),
        ("GET", "/chat/completions", 405),
        ("GET", "/responses", 405),
    ]:
        answer = httpx.request(method, f"{server.url}{path}", headers=headers, json={})
        assert answer.status_code == status
        error = answer.json()["error"]
        assert set(error) == {"message", "type", "param", "code"} and error["message"]
    refused = httpx.post(
        f"{server.url}/responses",
        headers=headers,
        json={"model": "math", "input": "hi", "previous_response_id": "resp_1"},
    )
    assert refused.status_code == 400 and "whole input" in refused.json()["error"]["message"]


def _sdk_team(url):
    """An Agents SDK program as it comes: a triage agent handing off to a math agent with one
    function tool; models named by agent, the SDK's own provider (the Responses API)."""
    from agents import Agent, RunConfig, function_tool, set_tracing_disabled
    from agents.models.openai_provider import OpenAIProvider

    set_tracing_disabled(True)
    api = openai.AsyncOpenAI(base_url=url, api_key=KEY, max_retries=0)

    @function_tool
    def calculate(expression: str) -> str:
        """Evaluate an arithmetic expression."""
        return str(sum(int(term) for term in expression.split("+")))

    math = Agent(name="math", instructions="Compute.", model="math", tools=[calculate])
    triage = Agent(name="planner", instructions="Route.", model="planner", handoffs=[math])
    return triage, RunConfig(model_provider=OpenAIProvider(openai_client=api))


@pytest.mark.parametrize("streamed", [False, True])
def test_the_agents_sdk_default_client_is_served(served, streamed):
    from agents import Runner

    server, policy, _ = served
    triage, config = _sdk_team(server.url)

    async def run():
        if not streamed:
            return await Runner.run(triage, "2 + 2?", run_config=config)
        result = Runner.run_streamed(triage, "2 + 2?", run_config=config)
        async for _ in result.stream_events():
            pass
        return result

    result = asyncio.run(run())
    assert result.last_agent.name == "math"
    assert result.final_output == "the sum is \\boxed{4}"
    assert [agent for agent, _ in policy.seen] == ["planner", "math", "math"]


@pytest.fixture(scope="module")
def tiny_served(tiny_path):
    """The built-in tiny model served as a two-agent team, greedy, 8 tokens a reply."""
    from marft_algos.policy import MultiAgentPolicy
    from marft_algos.protocols import GenerationSettings
    from marft_algos.serving import ServedTeam

    policy = MultiAgentPolicy.from_pretrained(tiny_path, ["planner", "math"], seed=0)
    settings = GenerationSettings(max_new_tokens=8, do_sample=False)
    team = ServedTeam(policy, settings, TOOL_PARSERS["hermes"], tool_prompt="hermes")
    with BackgroundServer(team) as server:
        yield server, openai.OpenAI(base_url=server.url, api_key="none", max_retries=0)


def test_a_served_tiny_model_streams_what_it_answers_whole(tiny_served):
    _, client = tiny_served
    whole = client.chat.completions.create(model="math", messages=ASK).choices[0].message
    chunks = client.chat.completions.create(model="math", messages=ASK, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == whole.content
    response = client.responses.create(model="math", input=ASK)
    assert response.output_text == whole.content and response.usage.output_tokens <= 8
    with client.responses.stream(model="math", input=ASK) as stream:
        deltas = "".join(e.delta for e in stream if e.type == "response.output_text.delta")
        final = stream.get_final_response()
    assert deltas == final.output_text == whole.content
    if response.usage.output_tokens == 8:  # cut at the agent's budget: marked on the message
        assert response.status == "completed" and response.output[0].status == "incomplete"


def test_a_served_tiny_model_answers_the_agents_sdk_default_client(tiny_served):
    from agents import Agent, RunConfig, Runner, set_tracing_disabled
    from agents.models.openai_provider import OpenAIProvider

    server, client = tiny_served
    set_tracing_disabled(True)
    api = openai.AsyncOpenAI(base_url=server.url, api_key="none", max_retries=0)
    agent = Agent(name="math", instructions="Be brief.", model="math")
    config = RunConfig(model_provider=OpenAIProvider(openai_client=api))
    result = asyncio.run(Runner.run(agent, "2 + 2?", run_config=config))
    expected = client.chat.completions.create(model="math", messages=ASK)
    assert result.final_output == expected.choices[0].message.content


def test_structured_outputs_are_served_as_generated_and_a_malformed_format_is_400(served):
    _, policy, client = served
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}}
    plain = client.chat.completions.create(model="math", messages=ASK)
    chat = client.chat.completions.create(
        model="math",
        messages=ASK,
        response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": schema}},
    )
    response = client.responses.create(
        model="math",
        input=ASK,
        text={"format": {"type": "json_schema", "name": "a", "schema": schema}},
    )
    # Not enforced: the reply is the one the same call gets without a format.
    assert chat.choices[0].message.content == plain.choices[0].message.content
    assert response.output_text == plain.choices[0].message.content
    assert response.text.format.type == "json_schema" and response.text.format.name == "a"
    assert policy.seen[0] == policy.seen[1] == policy.seen[2]  # the format changes no prompt
    with pytest.raises(openai.BadRequestError, match="response_format must be") as caught:
        client.chat.completions.create(model="math", messages=ASK, response_format={"type": "xml"})
    assert caught.value.body["type"] == "invalid_request_error"
    with pytest.raises(openai.BadRequestError, match=r"text\.format must be"):
        client.responses.create(model="math", input=ASK, text={"format": {"type": "yaml"}})
