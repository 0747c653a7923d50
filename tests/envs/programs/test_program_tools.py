"""Tool calls of agent programs: the reply parsed into ``tool_calls``, tool messages and tools in
the observation, and tools described in text for templates without tool support."""

from __future__ import annotations

import json

import pytest
from pettingzoo.test import api_test, seed_test

from marft_envs import ChatObservation
from marft_envs.programs import ProgramEnv
from marft_envs.wire.tools import hermes_prompt, parse_hermes, register_tool_parser

WEATHER = {
    "type": "function",
    "function": {
        "name": "weather",
        "description": "Today's weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
CALL = '<tool_call>{"name": "weather", "arguments": {"city": "Oslo"}}</tool_call>'


@pytest.mark.parametrize(
    ("text", "content", "calls"),
    [
        ("no tools here", "no tools here", []),
        (CALL, None, [("weather", '{"city": "Oslo"}')]),
        (
            "Checking.\n" + CALL + '\n<tool_call>{"name": "weather", "arguments": "{\\"city\\": '
            '\\"Rome\\"}"}</tool_call>',
            "Checking.",
            [("weather", '{"city": "Oslo"}'), ("weather", '{"city": "Rome"}')],
        ),
        ('<tool_call>{"name": "weather"}</tool_call>', None, [("weather", "{}")]),
        # Not a call: the program gets the whole text back, as the model wrote it.
        ("<tool_call>{not json}</tool_call>", "<tool_call>{not json}</tool_call>", []),
        (
            '<tool_call>{"arguments": {}}</tool_call>',
            '<tool_call>{"arguments": {}}</tool_call>',
            [],
        ),
        ('<tool_call>["weather"]</tool_call>', '<tool_call>["weather"]</tool_call>', []),
        (
            '<tool_call>{"name": "weather", "arguments": [1]}</tool_call>',
            '<tool_call>{"name": "weather", "arguments": [1]}</tool_call>',
            [],
        ),
        (CALL + '<tool_call>{"name": "wea', CALL + '<tool_call>{"name": "wea', []),  # cut short
    ],
)
def test_the_hermes_parser(text, content, calls):
    assert parse_hermes(text) == (content, calls)


def tool_loop(task, client):
    """The OpenAI tool loop: offer a tool, run what the model calls, send the results back."""
    messages = [
        {"role": "system", "content": "You answer weather questions."},
        {"role": "user", "content": task},
    ]
    first = client.chat.completions.create(model="assistant", messages=messages, tools=[WEATHER])
    message = first.choices[0].message
    if not message.tool_calls:
        return {"success": 0.0, "finish": float(first.choices[0].finish_reason == "tool_calls")}
    messages.append(message)  # the response's message object itself, as OpenAI code does
    for call in message.tool_calls:
        city = json.loads(call.function.arguments)["city"]
        messages.append({"role": "tool", "tool_call_id": call.id, "content": f"{city}: sunny"})
    final = client.chat.completions.create(model="assistant", messages=messages, tools=[WEATHER])
    return {
        "success": float("sunny" in (final.choices[0].message.content or "")),
        "finish": float(first.choices[0].finish_reason == "tool_calls"),
    }


def play(env, replies, seed=0):
    """Answer the episode's calls with ``replies`` in order; the observations, and the final info
    in ``env.final_info``."""
    env.reset(seed=seed)
    seen = []
    while env.agents:
        agent = env.agent_selection
        if env.terminations[agent] or env.truncations[agent]:
            env.final_info = dict(env.infos[agent])
            env.step(None)
            continue
        observation = env.observe(agent)
        seen.append(observation)
        env.step(replies[len(seen) - 1])
    return seen


def test_a_tool_call_round_trip_in_process():
    env = ProgramEnv(tool_loop, ["assistant"], ["Weather in Oslo?"] * 4)
    seen = play(env, ["Let me look.\n" + CALL, "It is sunny in Oslo."])
    first, second = seen
    assert first["tools"] == [WEATHER]
    assert first["messages"][-1] == {"role": "user", "content": "Weather in Oslo?"}
    # The program's own message object and its tool result, as chat templates take them.
    assert second["messages"][2] == {
        "role": "assistant",
        "content": "Let me look.",
        "tool_calls": [
            {
                "id": "call_0_0",
                "type": "function",
                "function": {"name": "weather", "arguments": {"city": "Oslo"}},
            }
        ],
    }
    assert second["messages"][3] == {
        "role": "tool",
        "content": "Oslo: sunny",
        "tool_call_id": "call_0_0",
    }
    assert ChatObservation().contains(first) and ChatObservation().contains(second)
    info = env.final_info
    assert info["reward_parts"] == {"success": 1.0, "finish": 1.0}


def test_a_reply_without_a_call_reaches_the_program_as_text():
    env = ProgramEnv(tool_loop, ["assistant"], ["Weather in Oslo?"] * 4)
    seen = play(env, ["I cannot check the weather."])
    assert len(seen) == 1
    assert env.final_info["reward_parts"] == {"success": 0.0, "finish": 0.0}


def test_tool_prompt_writes_tools_calls_and_results_as_text():
    env = ProgramEnv(tool_loop, ["assistant"], ["Weather in Oslo?"] * 4, tool_prompt="hermes")
    first, second = play(env, [CALL, "sunny"])
    assert set(first) == {"messages"} and set(second) == {"messages"}
    system = first["messages"][0]["content"]
    assert system.startswith("You answer weather questions.\n\n")
    assert json.dumps(WEATHER["function"]) in system
    assert second["messages"][2] == {"role": "assistant", "content": CALL}
    assert second["messages"][3] == {
        "role": "user",
        "content": "<tool_response>\nOslo: sunny\n</tool_response>",
    }
    assert all(set(m) == {"role", "content"} for m in second["messages"])


def test_hermes_prompt_adds_a_system_message_when_there_is_none():
    out = hermes_prompt([{"role": "user", "content": "hi"}], [WEATHER])
    assert [m["role"] for m in out] == ["system", "user"]
    assert "<tools>" in out[0]["content"] and out[1] == {"role": "user", "content": "hi"}
    assert hermes_prompt([{"role": "user", "content": "hi"}], None) == [
        {"role": "user", "content": "hi"}
    ]


def test_a_custom_tool_parser():
    def bang(text):
        name, _, city = text.partition("!")
        return None, [(name, json.dumps({"city": city}))] if city else []

    register_tool_parser("bang", bang)
    env = ProgramEnv(tool_loop, ["assistant"], ["Weather in Oslo?"] * 4, tool_parser="bang")
    play(env, ["weather!Lima", "sunny"])
    assert env.final_info["reward_parts"]["success"] == 1.0
    with pytest.raises(ValueError, match="tool_parser='nope'"):
        ProgramEnv(tool_loop, ["assistant"], ["x"], tool_parser="nope")
    with pytest.raises(ValueError, match="tool_prompt"):
        ProgramEnv(tool_loop, ["assistant"], ["x"], tool_prompt="xml")


@pytest.mark.parametrize(
    "messages",
    [
        [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}],
        [{"role": "assistant", "content": None, "tool_calls": [{"id": "c", "function": "f"}]}],
    ],
)
def test_malformed_tool_messages_are_refused_by_name(messages):
    caught = {}

    def program(task, client):
        try:
            client.chat.completions.create(model="assistant", messages=messages)
        except TypeError as err:
            caught["message"] = str(err)
        client.chat.completions.create(
            model="assistant", messages=[{"role": "user", "content": "x"}]
        )
        return 0.0

    play(ProgramEnv(program, ["assistant"], ["t"]), ["ok"])
    assert "messages[0]" in caught["message"]


def test_text_parts_are_joined():
    def program(task, client):
        parts = [{"type": "text", "text": "Hello "}, {"type": "text", "text": "there"}]
        client.chat.completions.create(
            model="assistant", messages=[{"role": "user", "content": parts}]
        )
        return 0.0

    (observation,) = play(ProgramEnv(program, ["assistant"], ["t"]), ["ok"])
    assert observation["messages"] == [{"role": "user", "content": "Hello there"}]


def test_pettingzoo_api_and_seed_tests_with_tools():
    def env_fn():
        return ProgramEnv(tool_loop, ["assistant"], [f"Weather in city {i}?" for i in range(9)])

    api_test(env_fn(), num_cycles=10)
    seed_test(env_fn, num_cycles=10)
