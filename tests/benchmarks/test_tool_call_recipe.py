"""The tool-call benchmark's task, grader and measurement (benchmarks/tool_calls)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "tool_calls"))
tool_task = pytest.importorskip("tool_task")
measure = pytest.importorskip("measure")

import marft_envs  # noqa: E402

#: Importing tool_task registers its ids (for ``marft train --env tool_task:...``); they stay out
#: of the global registry that other test modules enumerate, and are back for these tests only.
TOOL_IDS = [i for i in list(marft_envs.registry) if i.startswith("tool-lookup-")]
for _id in TOOL_IDS:
    del marft_envs.registry[_id]


@pytest.fixture(autouse=True)
def _tool_ids():
    tool_task.register()
    yield
    for env_id in TOOL_IDS:
        marft_envs.registry.pop(env_id, None)


from marft_envs.programs.tools import hermes_prompt, parse_tool_calls, resolve_parser  # noqa: E402

AMOUNT = {"tool": "get_invoice_amount", "answer": "$482.17"}
DATE = {"tool": "get_delivery_date", "answer": "March 4"}


@pytest.mark.parametrize(
    ("answer", "task", "right"),
    [
        ("Invoice 7280 comes to $482.17.", AMOUNT, True),
        ("You owe 482.17 dollars.", AMOUNT, True),
        ("It is $482.", AMOUNT, False),
        ("It is $4,821.70.", AMOUNT, False),
        ("It arrives on March 4th.", DATE, True),
        ("Expect it on 4 March.", DATE, True),
        ("It arrives on March 14.", DATE, False),
        ("It arrives on May 4.", DATE, False),
        ("Let me look that up.", DATE, False),
    ],
)
def test_the_grader_pays_the_asked_value(answer, task, right):
    assert tool_task.grade(answer, task) is right


@pytest.mark.parametrize(
    ("reply", "counts"),
    [
        (
            '<tool_call>{"name": "get_invoice_amount", "arguments": {"invoice_id": "7"}}</tool_call>',
            True,
        ),
        (
            'Sure. <tool_call>{"name": "get_delivery_date", "arguments": {"order_id": 7}}</tool_call>',
            True,
        ),
        ('<tool_call>{"name": "lookup", "arguments": {"invoice_id": "7"}}</tool_call>', False),
        (
            '<tool_call>{"name": "get_invoice_amount", "arguments": {"invoice_id": </tool_call>',
            False,
        ),
        ('<tool_call>{"name": "get_invoice_amount", "arguments": {"invoice_id": "7"}}', False),
        ("You can call tools. Their signatures, one JSON object a line:", False),
    ],
)
def test_the_measure_is_a_parsed_call_to_an_offered_tool(reply, counts):
    assert measure.first_reply_is_call(reply) is counts


class ScriptedClient:
    """The ``openai`` surface the program uses, answering with scripted texts parsed by the env's
    own parser, and keeping the messages as the env would render them."""

    def __init__(self, replies):
        self.replies = list(replies)
        self.prompts = []
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self.create))

    def create(self, model, messages, tools=None):
        assert model == tool_task.AGENT
        self.prompts.append(hermes_prompt(messages, tools))
        content, calls = parse_tool_calls(self.replies.pop(0), resolve_parser("hermes"), 0)
        message = SimpleNamespace(content=content, tool_calls=calls or None)
        return SimpleNamespace(choices=[SimpleNamespace(message=message)])


def test_a_right_call_then_the_value_succeeds():
    task = tool_task.test_tasks()[0]
    name = task["tool"]
    key = tool_task.TOOL_FIELDS[name][0]
    call = json.dumps({"name": name, "arguments": {key: task["id"]}})
    client = ScriptedClient([f"<tool_call>{call}</tool_call>", f"It is {task['answer']}."])
    parts = tool_task.lookup_program(tool_task.EXAMPLE)(task, client)
    assert parts == {"success": 1.0, "tool_call": 1.0, "right_call": 1.0}
    tool_result = client.prompts[1][-1]["content"]
    assert task["answer"] in tool_result and "<tool_response>" in tool_result
    assert task["answer"] not in json.dumps(client.prompts[0])  # only the tool knows it


def test_a_wrong_id_gets_no_value_and_no_call_is_graded_as_the_answer():
    task = tool_task.test_tasks()[0]
    name = task["tool"]
    key = tool_task.TOOL_FIELDS[name][0]
    call = json.dumps({"name": name, "arguments": {key: "1"}})
    client = ScriptedClient([f"<tool_call>{call}</tool_call>", "I could not find it."])
    parts = tool_task.lookup_program([])(task, client)
    assert parts == {"success": 0.0, "tool_call": 1.0, "right_call": 0.0}
    assert "Error: no" in client.prompts[1][-1]["content"]
    client = ScriptedClient([f"It is {task['answer']}."])  # a (lucky) answer without a call
    assert tool_task.lookup_program([])(task, client)["tool_call"] == 0.0


def test_the_held_out_split_shares_no_phrasing_or_id():
    tool_task.check_split()
    test = tool_task.test_tasks()
    assert len(test) == 60 and test == tool_task.test_tasks()
    assert {t["tool"] for t in test} == set(tool_task.OFFERED)


def test_one_measurement_on_the_builtin_model(tmp_path):
    out = tmp_path / "untuned.json"
    result = measure.main(
        ["untuned", "--model", "marft-tiny-math", "--episodes", "2", "--out", str(out)]
    )
    for key in ("tool-lookup-v0/greedy", "tool-lookup-example-v0/sampled_T1"):
        summary = result[key]["summary"]
        assert summary["episodes"] == 2 and summary["program_errors"] == 0
        assert summary["parser_and_program_agree"]
    assert json.loads(out.read_text())["model"] == "marft-tiny-math"
