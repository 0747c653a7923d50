"""The Responses API translation and the server-sent events, checked against the ``openai``
package's own types (strict validation, not the client's lenient parse)."""

from __future__ import annotations

import json

import pytest

openai = pytest.importorskip("openai", reason="the wire types are checked against openai's")

from openai.types.chat import ChatCompletionChunk  # noqa: E402
from openai.types.responses import Response, ResponseStreamEvent  # noqa: E402
from pydantic import TypeAdapter  # noqa: E402

from marft_envs.wire.protocol import Function, Reply, ToolCall, completion, without_none  # noqa: E402
from marft_envs.wire.responses import response_object, responses_request  # noqa: E402
from marft_envs.wire.streaming import chat_events, response_events, text_pieces  # noqa: E402

TOOL = {"type": "function", "name": "look", "parameters": {"type": "object"}, "strict": False}
TEXT = Reply("  Two words,\n\tthen  more ", False, 5, 8)
CALLS = Reply(
    "Let me look.<tool_call>...</tool_call>",
    True,
    5,
    9,
    content="Let me look.",
    tool_calls=[ToolCall("call_3_0", Function("look", '{"q": "x"}'))],
)


@pytest.mark.parametrize("text", ["", " ", "a", " lead", "two  words\n\n", "x\ty z  "])
def test_text_pieces_join_to_the_text(text):
    assert "".join(text_pieces(text)) == text


def test_the_input_maps_onto_chat_messages():
    request = responses_request(
        {
            "model": "planner",
            "instructions": "Be brief.",
            "input": [
                {"role": "developer", "content": "Use tools."},
                {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": "q"}],
                },
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": "a"}],
                },
                {"type": "function_call", "call_id": "c1", "name": "look", "arguments": "{}"},
                {"type": "function_call", "call_id": "c2", "name": "look", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "one"},
                {"type": "reasoning", "summary": []},
                {
                    "type": "function_call_output",
                    "call_id": "c2",
                    "output": [{"type": "input_text", "text": "two"}],
                },
            ],
            "tools": [TOOL],
            "max_output_tokens": 7,
            "temperature": 0.5,
            "include": [],
            "store": False,
        }
    )
    call = {"type": "function", "function": {"name": "look", "arguments": "{}"}}
    assert request.messages == [
        {"role": "system", "content": "Be brief."},
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "q"},
        {
            "role": "assistant",
            "content": "a",
            "tool_calls": [{"id": "c1", **call}, {"id": "c2", **call}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "one"},
        {"role": "tool", "tool_call_id": "c2", "content": "two"},
    ]
    assert request.fields == {
        "temperature": 0.5,
        "max_tokens": 7,
        "tools": [
            {
                "type": "function",
                "function": {"name": "look", "parameters": {"type": "object"}, "strict": False},
            }
        ],
    }
    assert list(request.fields["tools"][0]["function"]) == ["name", "parameters", "strict"]


@pytest.mark.parametrize("reply", [TEXT, CALLS])
def test_a_response_is_valid_as_openai_types_it(reply):
    echo = responses_request({"model": "a", "input": "q", "tools": [TOOL]}).echo
    data = json.loads(json.dumps(response_object("a", reply, echo)))
    parsed = Response.model_validate(data)
    assert parsed.status == "completed"
    assert parsed.usage.total_tokens == reply.prompt_tokens + reply.completion_tokens
    if reply is TEXT:
        assert parsed.output_text == TEXT.text
        assert parsed.output[0].status == "incomplete"  # cut at the agent's budget
    else:
        message, call = parsed.output
        assert message.content[0].text == "Let me look."
        assert (call.call_id, call.name, call.arguments) == ("call_3_0", "look", '{"q": "x"}')
    events = TypeAdapter(ResponseStreamEvent)
    streamed = [_data(e) for e in response_events(data)]
    for event in streamed:
        events.validate_python(event)
    assert streamed[-1]["response"] == data


@pytest.mark.parametrize("reply", [TEXT, CALLS])
def test_chat_chunks_are_valid_as_openai_types_them(reply):
    whole = without_none(completion("a", reply).model_dump())
    raw = list(chat_events(whole, include_usage=True))
    assert raw[-1] == b"data: [DONE]\n\n"
    chunks = [ChatCompletionChunk.model_validate(_data(e)) for e in raw[:-1]]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == (whole["choices"][0]["message"]["content"] or "")
    calls = [t for c in chunks if c.choices for t in c.choices[0].delta.tool_calls or []]
    assert [(t.id, t.function.name, t.function.arguments) for t in calls] == [
        (t.id, t.function.name, t.function.arguments) for t in reply.tool_calls
    ]
    assert chunks[-2].choices[0].finish_reason == whole["choices"][0]["finish_reason"]
    assert chunks[-1].usage.completion_tokens == reply.completion_tokens


def _data(event: bytes) -> dict:
    (line,) = [x for x in event.decode().splitlines() if x.startswith("data: ")]
    return json.loads(line[len("data: ") :])
