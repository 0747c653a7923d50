"""Recorded OTLP traces read back (marft_envs.programs.traces): the files the real
instrumentations wrote (opentelemetry-instrumentation-openai-v2 in both GenAI conventions,
OpenInference) give the same calls and tasks, and hand-built spans cover what those files do not:
span events, system instructions, tool calls, message parts, agent names on an ancestor span."""

from __future__ import annotations

import json

import pytest
from trace_files import RECORDED, TICKETS, genai_call, request, span, write_lines

from marft_envs.programs.traces import load_trace_tasks, read_trace_calls


@pytest.mark.parametrize("convention", sorted(RECORDED))
def test_each_instrumentation_gives_the_same_calls_and_tasks(convention):
    traces = read_trace_calls(RECORDED[convention])
    assert len(traces) == 4  # the fourth ticket repeats the first: a trace of its own
    first = traces[0].calls
    assert [c.agent for c in first] == ["router", "solver"]
    assert first[0].messages == [
        {"role": "system", "content": "Route the ticket: billing or tech."},
        {"role": "user", "content": TICKETS[0]},
    ]
    assert first[0].output == {"role": "assistant", "content": "billing"}
    assert first[1].messages[0] == {"role": "system", "content": "You are the billing desk."}
    assert first[0].model == "router" and first[0].finish_reason == "stop"
    assert traces[1].calls[1].reply == f"Reply to: {TICKETS[1]}"
    for task in ("first_user_message", "root:app.ticket"):
        tasks = load_trace_tasks(RECORDED[convention], task=task)
        assert list(tasks) == TICKETS
        assert (tasks.summary.traces, tasks.summary.duplicates) == (4, 1)
    # Ids and timestamps group the calls; none is in a call's messages or a task.
    text = json.dumps([[c.messages, c.output] for t in traces for c in t.calls])
    assert traces[0].episode not in text and "UnixNano" not in text


def test_older_conventions_as_span_events_and_the_agent_named_above(tmp_path):
    agent = span("a1", "01", "invoke_agent triage", {"gen_ai.agent.name": "triage"})
    call = span(
        "a1",
        "02",
        "chat gpt-4o",
        {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o"},
        parent="01",
        start=1,
        events=[
            ("gen_ai.system.message", {"gen_ai.system": "openai", "content": "Be brief."}),
            ("gen_ai.user.message", {"gen_ai.system": "openai", "content": "Refund?"}),
            (
                "gen_ai.choice",
                {
                    "gen_ai.event.content": json.dumps(
                        {
                            "index": 0,
                            "finish_reason": "stop",
                            "message": {"role": "assistant", "content": "Yes."},
                        }
                    )
                },
            ),
        ],
    )
    path = write_lines(tmp_path / "t.jsonl", [request([agent, call])])
    (trace,) = read_trace_calls(path)
    (recorded,) = trace.calls
    assert recorded.agent == "triage" and recorded.model == "gpt-4o"
    assert recorded.messages == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Refund?"},
    ]
    assert recorded.output == {"role": "assistant", "content": "Yes."}
    # The user's mapping renames agents; without gen_ai.agent.name the request model names it.
    (trace,) = read_trace_calls(path, agents={"triage": "router"})
    assert trace.calls[0].agent == "router"


def test_newer_conventions_system_instructions_and_tool_calls(tmp_path):
    call = span(
        "b2",
        "01",
        "chat m",
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": "planner",
            "gen_ai.system_instructions": json.dumps([{"type": "text", "content": "Plan."}]),
            "gen_ai.input.messages": json.dumps(
                [
                    {"role": "user", "parts": [{"type": "text", "content": "Weather?"}]},
                    {
                        "role": "assistant",
                        "parts": [
                            {
                                "type": "tool_call",
                                "id": "c1",
                                "name": "weather",
                                "arguments": {"city": "Oslo"},
                            }
                        ],
                    },
                    {
                        "role": "tool",
                        "parts": [{"type": "tool_call_response", "id": "c1", "response": "rain"}],
                    },
                ]
            ),
            "gen_ai.output.messages": json.dumps(
                [
                    {
                        "role": "assistant",
                        "parts": [{"type": "text", "content": "Rain."}],
                        "finish_reason": "stop",
                    }
                ]
            ),
        },
    )
    (trace,) = read_trace_calls(write_lines(tmp_path / "t.jsonl", [request([call])]))
    messages = trace.calls[0].messages
    assert messages[0] == {"role": "system", "content": "Plan."}
    assert messages[2]["tool_calls"][0]["function"] == {
        "name": "weather",
        "arguments": '{"city": "Oslo"}',
    }
    assert messages[3] == {"role": "tool", "content": "rain", "tool_call_id": "c1"}
    assert trace.calls[0].reply == "Rain."
    assert list(load_trace_tasks(tmp_path / "t.jsonl")) == ["Weather?"]


def test_openinference_message_parts_and_a_json_attribute_path(tmp_path):
    root = span(
        "c3",
        "01",
        "agent",
        {
            "openinference.span.kind": "CHAIN",
            "input.value": json.dumps({"ticket": {"text": "Late parcel"}}),
        },
    )
    call = span(
        "c3",
        "02",
        "ChatCompletion",
        {
            "openinference.span.kind": "LLM",
            "llm.model_name": "writer",
            "llm.input_messages.0.message.role": "user",
            "llm.input_messages.0.message.contents.0.message_content.type": "text",
            "llm.input_messages.0.message.contents.0.message_content.text": "Late ",
            "llm.input_messages.0.message.contents.1.message_content.type": "text",
            "llm.input_messages.0.message.contents.1.message_content.text": "parcel",
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.content": "Sorry.",
        },
        parent="01",
        start=1,
    )
    path = write_lines(tmp_path / "t.jsonl", [request([root, call])])
    (trace,) = read_trace_calls(path)
    assert trace.calls[0].agent == "writer"
    assert trace.calls[0].messages == [{"role": "user", "content": "Late parcel"}]
    assert list(load_trace_tasks(path, task="root:input.value#ticket.text")) == ["Late parcel"]
    assert list(load_trace_tasks(path, task="span:ChatCompletion:llm.model_name")) == ["writer"]
    assert list(
        load_trace_tasks(
            path, task={"q": "first_user_message", "who": "span:ChatCompletion:llm.model_name"}
        )
    ) == [{"q": "Late parcel", "who": "writer"}]
    assert list(load_trace_tasks(path, task=lambda t: len(t.calls))) == [1]


def test_a_whole_document_and_calls_in_start_order(tmp_path):
    calls = [
        genai_call("d4", "03", "", "second", "b", "2", start=9),
        genai_call("d4", "02", "", "first", "a", "1", start=1),
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps(request(calls), indent=2))  # pretty-printed: one document
    (trace,) = read_trace_calls(path, format="otlp")
    assert [c.agent for c in trace.calls] == ["first", "second"]
    assert list(load_trace_tasks(path)) == ["a"]
