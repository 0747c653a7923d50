"""Bad recorded traces get one line naming the file, the line and the field; duplicate tasks are
counted and dropped; ids and timestamps are never selected; the split holds no task twice."""

from __future__ import annotations

import json
import logging
import pickle

import pytest
from trace_files import RECORDED, genai_call, request, span, ticket_trace, write_lines

from marft_envs.programs.traces import (
    TraceFormatError,
    load_trace_tasks,
    read_trace_calls,
    split_trace_tasks,
)


def one_line(err: pytest.ExceptionInfo) -> str:
    text = str(err.value)
    assert "\n" not in text
    return text


def test_a_malformed_span_names_the_file_line_and_field(tmp_path):
    good = request(ticket_trace("a1", "t1"))
    bad = request(ticket_trace("a2", "t2"))
    del bad["resourceSpans"][0]["scopeSpans"][0]["spans"][1]["spanId"]
    path = write_lines(tmp_path / "t.jsonl", [good, bad])
    with pytest.raises(TraceFormatError) as err:
        load_trace_tasks(path)
    assert one_line(err).startswith(
        f"{path}:2 resourceSpans[0].scopeSpans[0].spans[1]: spanId: missing: a malformed span"
    )
    bad["resourceSpans"][0]["scopeSpans"][0]["spans"][1]["spanId"] = "not-hex"
    write_lines(path, [good, bad])
    with pytest.raises(
        TraceFormatError, match=r"t\.jsonl:2 .*spans\[1\]: spanId: must be a hex id"
    ):
        load_trace_tasks(path)
    path.write_text(json.dumps(good) + "\n{not json\n")
    with pytest.raises(TraceFormatError, match=r"t\.jsonl:2: not JSON"):
        load_trace_tasks(path)


def test_a_missing_field_and_a_trace_with_no_root(tmp_path):
    path = write_lines(tmp_path / "t.jsonl", [request(ticket_trace("a1", "t1"))])
    with pytest.raises(TraceFormatError) as err:
        load_trace_tasks(path, task="root:app.customer")
    assert one_line(err).startswith(
        f"{path}:1 resourceSpans[0].scopeSpans[0].spans[0]: app.customer: missing on span 'handle_ticket' (it has: app.ticket)"
    )
    orphan = genai_call("b2", "02", "01", "solo", "hi", "yo", 1)  # its parent was never exported
    write_lines(path, [request([orphan])])
    with pytest.raises(
        TraceFormatError, match=r"t\.jsonl:1 .*: parentSpanId: trace b2000000… has no root span"
    ):
        load_trace_tasks(path, task="root:app.ticket")
    assert list(load_trace_tasks(path)) == ["hi"]  # the first user message needs no root


def test_a_call_without_message_content_says_how_to_record_it(tmp_path):
    call = span(
        "c3", "01", "chat solo", {"gen_ai.operation.name": "chat", "gen_ai.request.model": "solo"}
    )
    path = write_lines(tmp_path / "t.jsonl", [request([call])])
    with pytest.raises(
        TraceFormatError,
        match=r"gen_ai\.input\.messages: the span holds no message content: record it with .*CAPTURE_MESSAGE_CONTENT=true",
    ):
        read_trace_calls(path)
    # openai-v2's event conventions: the spans without their logs file.
    with pytest.raises(
        TraceFormatError, match=r"openai_v2_events\.spans\.jsonl:1 .*no message content"
    ):
        read_trace_calls(RECORDED["openai-v2 events"][0])


def test_unknown_format_and_bad_selectors(tmp_path):
    path = write_lines(tmp_path / "t.jsonl", [{"hello": 1}])
    with pytest.raises(
        TraceFormatError, match=r"t\.jsonl:1: format: unknown \(found \['hello'\]\)"
    ):
        load_trace_tasks(path)
    with pytest.raises(ValueError, match=r"format='csv' is not one of"):
        load_trace_tasks(path, format="csv")
    for selector in (
        "root:session.id",
        "record:conversation_id",
        "span:x:traceId",
        "record:meta.created_at",
    ):
        with pytest.raises(
            ValueError, match=r"an id or a time: ids and timestamps are never trained on"
        ):
            load_trace_tasks(path, task=selector)
    with pytest.raises(ValueError, match=r"task='ticket' is not a selector"):
        load_trace_tasks(path, task="ticket")
    with pytest.raises(FileNotFoundError, match=r"nope\.jsonl is not a file nor a folder"):
        load_trace_tasks(tmp_path / "nope.jsonl")


def test_duplicates_are_counted_and_dropped_and_logged(tmp_path, caplog):
    traces = [request(ticket_trace(f"{i:02d}", t)) for i, t in enumerate(["a", "b", "a", "c", "b"])]
    folder = tmp_path / "traces"
    folder.mkdir()
    write_lines(folder / "1.jsonl", traces[:3])
    write_lines(folder / "2.jsonl", traces[3:])
    with caplog.at_level(logging.INFO, logger="marft_envs.programs.traces.loader"):
        tasks = load_trace_tasks(folder, task="root:app.ticket")
    assert list(tasks) == ["a", "b", "c"]
    assert (tasks.summary.files, tasks.summary.traces, tasks.summary.duplicates) == (2, 5, 2)
    assert "Loaded 3 tasks from 5 traces in 2 files: 2 duplicates dropped" in caplog.text
    # A run records the list's count and sha256, not the tasks (they stay with the user).
    assert set(tasks.run_record()) == {"inline", "sha256"} and tasks.run_record()["inline"] == 3
    again = pickle.loads(pickle.dumps(tasks))  # a program env travels to its child process
    assert again == tasks and again.summary == tasks.summary and again.sha256 == tasks.sha256


def test_split_holds_no_task_on_both_sides(tmp_path):
    traces = [request(ticket_trace(f"{i:02d}", f"ticket {i}")) for i in range(10)]
    tasks = load_trace_tasks(write_lines(tmp_path / "t.jsonl", traces), task="root:app.ticket")
    train, test = split_trace_tasks(tasks, test_size=0.3, seed=1)
    assert len(test) == 3 and sorted(train + test) == sorted(tasks)
    assert not set(train) & set(test)
    assert split_trace_tasks(tasks, test_size=0.3, seed=1) == (train, test)
