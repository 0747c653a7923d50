"""JSON-lines chat logs read back (marft_envs.programs.traces.chatlog): a record per call or per
conversation, episodes grouped by their id field, the reply field, and record-field tasks."""

from __future__ import annotations

import pytest
from trace_files import write_lines

from marft_envs.programs.traces import ChatLogFields, load_trace_tasks, read_trace_calls

SYSTEM = {"role": "system", "content": "Help."}
ASK = {"role": "user", "content": "Where is my parcel?"}
ANSWER = {"role": "assistant", "content": "Checking."}
MORE = {"role": "user", "content": "Thanks, and the refund?"}
REFUND = {"role": "assistant", "content": "Sent today."}


def test_a_conversation_record_and_per_call_records_read_the_same(tmp_path):
    conversation = write_lines(
        tmp_path / "c.jsonl", [{"agent": "desk", "messages": [SYSTEM, ASK, ANSWER, MORE, REFUND]}]
    )
    per_call = write_lines(
        tmp_path / "p.jsonl",
        [
            {"conversation_id": "x", "agent": "desk", "messages": [SYSTEM, ASK, ANSWER]},
            {
                "conversation_id": "x",
                "agent": "desk",
                "messages": [SYSTEM, ASK, ANSWER, MORE, REFUND],
            },
        ],
    )
    for path in (conversation, per_call):
        (trace,) = read_trace_calls(path)
        assert [(c.agent, c.messages, c.output) for c in trace.calls] == [
            ("desk", [SYSTEM, ASK], ANSWER),
            ("desk", [SYSTEM, ASK, ANSWER, MORE], REFUND),
        ]
        assert list(load_trace_tasks(path)) == [ASK["content"]]


def test_episodes_agents_and_reply_fields(tmp_path):
    path = write_lines(
        tmp_path / "log.jsonl",
        [
            {"episode": 1, "name": "router", "messages": [ASK], "response": "billing"},
            {
                "episode": 2,
                "model": "gpt-x",
                "messages": [MORE],
                "output": {"choices": [{"message": REFUND}]},
            },
            {
                "episode": 1,
                "name": "solver",
                "messages": [SYSTEM, ASK],
                "completion": ANSWER,
                "meta": {"ticket": "T"},
            },
            {
                "messages": [MORE, REFUND]
            },  # no episode field: an episode of its own; no agent: "assistant"
        ],
    )
    traces = read_trace_calls(path, agents={"gpt-x": "refunds", "assistant": "desk"})
    assert [[c.agent for c in t.calls] for t in traces] == [
        ["router", "solver"],
        ["refunds"],
        ["desk"],
    ]
    assert traces[0].calls[0].output == {"role": "assistant", "content": "billing"}
    assert traces[1].calls[0].output == REFUND and traces[1].calls[0].model == "gpt-x"
    assert traces[0].calls[1].where.endswith("log.jsonl:3")
    tasks = load_trace_tasks(path, task="record:messages[0].content")
    assert list(tasks) == [ASK["content"], MORE["content"]] and tasks.summary.duplicates == 1
    # A field only some episodes hold: an error naming the file, the line and the field, or skipped.
    with pytest.raises(ValueError, match=r"log\.jsonl:2: meta\.ticket: has no field 'meta' on"):
        load_trace_tasks(path, task="record:meta.ticket")
    skipped = load_trace_tasks(path, task="record:meta.ticket", missing="skip")
    assert list(skipped) == ["T"] and skipped.summary.skipped == 2


def test_renamed_fields(tmp_path):
    path = write_lines(
        tmp_path / "log.jsonl", [{"turns": [ASK, ANSWER], "bot": "desk", "thread": "t1"}]
    )
    fields = ChatLogFields(messages="turns", agent="bot", episode="thread")
    (trace,) = read_trace_calls(path, fields=fields)
    assert trace.episode == "t1" and trace.calls[0].agent == "desk"
    with pytest.raises(
        ValueError, match=r"log\.jsonl:1: format: unknown \(found \['bot', 'thread', 'turns'\]\)"
    ):
        read_trace_calls(path)


def test_a_log_of_requests_without_replies_holds_tasks_but_no_calls(tmp_path):
    path = write_lines(
        tmp_path / "requests.jsonl", [{"messages": [SYSTEM, ASK]}, {"messages": [MORE]}]
    )
    assert list(load_trace_tasks(path)) == [ASK["content"], MORE["content"]]
    with pytest.raises(ValueError, match=r"requests\.jsonl:1: messages: holds no assistant reply"):
        read_trace_calls(path)
