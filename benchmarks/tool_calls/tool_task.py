"""A lookup task that needs a tool call: the benchmark's agent program, tasks and grader.

One agent, ``assistant``, gets a customer question about an invoice's amount or an order's
delivery date, and two tools (``get_invoice_amount``, ``get_delivery_date``). The value is in no
prompt: only the tool returns it, so an answer is right only after the right call (or a lucky
guess among thousands of amounts and dates). The program makes at most two calls:

1. the question, with the tools; a reply without a tool call is the final answer;
2. after a tool call, the program runs every call it holds, sends the results back as
   ``role="tool"`` messages, and the second reply is the final answer.

The models measured here have no tool support in their chat templates, so both ids are
registered with ``tool_prompt="hermes"``: the env writes the tools into the system prompt as
JSON signatures and parses ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks.

==================  =========================================================================
``tool-lookup-v0``  the system prompt and the question (what a program written for a model
                    with tool support would send)
``tool-lookup-example-v0``  the same, with one worked example exchange (question, tool call,
                    tool result, answer) between the system prompt and the question
``tool-lookup-recipe-v0``  the same, with only the example's question and its tool call (no
                    result, no answer): the recipe's prompt (added after the design probes of
                    ``probe.py`` on training tasks, before any tuned run)
==================  =========================================================================

Reward parts (team reward ``Σ weight · part``; by default only ``success`` counts, the others
are logged with weight 0 and a run may weight them with ``reward_weights``):

===============  ===========================================================================
``success``      1 when the final answer states the asked value (:func:`grade`)
``tool_call``    1 when the first reply is a well-formed tool call: ``parse_hermes`` finds at
                 least one block, every block valid JSON with object arguments, and every
                 call names an offered tool
``right_call``   1 when, moreover, its first call is the right tool with the asked id
===============  ===========================================================================

Held-out tasks (:func:`test_tasks`, 60) use other phrasings and another id range than training
(:func:`check_split`). Fixed on 2026-11-27, before any tuned run; see RESULTS.md.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import numpy as np

import marft_envs

ENV_ID = "tool-lookup-v0"
EXAMPLE_ID = "tool-lookup-example-v0"
RECIPE_ID = "tool-lookup-recipe-v0"
AGENT = "assistant"
#: Weights of the logged parts when nothing else is asked (only ``success`` is paid).
LOGGED_ONLY = {"tool_call": 0.0, "right_call": 0.0}
NUM_TEST_TASKS = 60

# --------------------------------------------------------------------------- the tools
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_invoice_amount",
            "description": "The amount due on an invoice.",
            "parameters": {
                "type": "object",
                "properties": {
                    "invoice_id": {"type": "string", "description": "the invoice number"}
                },
                "required": ["invoice_id"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_delivery_date",
            "description": "The date an order will be delivered.",
            "parameters": {
                "type": "object",
                "properties": {"order_id": {"type": "string", "description": "the order number"}},
                "required": ["order_id"],
            },
        },
    },
]
OFFERED = {t["function"]["name"] for t in TOOLS}
#: tool -> (its argument, the field of the record it returns)
TOOL_FIELDS = {
    "get_invoice_amount": ("invoice_id", "amount"),
    "get_delivery_date": ("order_id", "date"),
}

# --------------------------------------------------------------------------- the prompts
SYSTEM = (
    "You are a customer support assistant. You do not know invoice amounts or delivery dates: "
    "look them up with a tool, then answer the customer in one short sentence."
)
#: The worked example exchange of ``tool-lookup-example-v0`` (its value is in no task).
EXAMPLE: list[dict[str, Any]] = [
    {"role": "user", "content": "How much is due on invoice 1234?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "example_0",
                "type": "function",
                "function": {"name": "get_invoice_amount", "arguments": '{"invoice_id": "1234"}'},
            }
        ],
    },
    {
        "role": "tool",
        "tool_call_id": "example_0",
        "content": '{"invoice_id": "1234", "amount": "$75.50"}',
    },
    {"role": "assistant", "content": "Invoice 1234 comes to $75.50."},
]
#: The recipe's example: the question and the call only. With the result and the answer too, the
#: untuned model continues the pattern of the last example message and writes a
#: ``<tool_response>`` itself (probe.py).
EXAMPLE_CALL = EXAMPLE[:2]
#: The example turns of each id.
EXAMPLES = {ENV_ID: [], EXAMPLE_ID: EXAMPLE, RECIPE_ID: EXAMPLE_CALL}

# --------------------------------------------------------------------------- tasks
MONTHS = [
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
]  # fmt: skip
#: tool -> phrasings; "{id}" is the invoice or order number.
PHRASINGS: dict[str, dict[str, list[str]]] = {
    "train": {
        "get_invoice_amount": [
            "How much do I owe on invoice {id}?",
            "What is the amount of invoice {id}?",
            "Invoice {id}: what's the total?",
        ],
        "get_delivery_date": [
            "When will order {id} be delivered?",
            "What is the delivery date of order {id}?",
            "Order {id}: when does it arrive?",
        ],
    },
    "test": {
        "get_invoice_amount": [
            "Tell me the sum billed on invoice {id}, please.",
            "I need the balance of invoice {id}.",
        ],
        "get_delivery_date": [
            "On what day should my order {id} arrive?",
            "Can you check when order {id} gets here?",
        ],
    },
}
#: Invoice and order numbers: train and test draw from disjoint ranges.
ID_RANGES = {"train": (2000, 6000), "test": (6000, 10000)}


def draw_task(rng: np.random.Generator, split: str) -> dict[str, Any]:
    """One task: a question about one record, and the records the tools read (the asked one and
    two others of the same kind, so a call with a wrong id gets another value)."""
    tool = str(rng.choice(sorted(PHRASINGS[split])))
    low, high = ID_RANGES[split]
    ids = [str(i) for i in rng.choice(np.arange(low, high), size=3, replace=False)]
    values = []
    for _ in ids:
        if tool == "get_invoice_amount":
            values.append(f"${int(rng.integers(10, 1000))}.{int(rng.integers(0, 100)):02d}")
        else:
            values.append(f"{MONTHS[int(rng.integers(12))]} {int(rng.integers(1, 29))}")
    phrasing = str(rng.choice(PHRASINGS[split][tool]))
    return {
        "request": phrasing.format(id=ids[0]),
        "tool": tool,
        "id": ids[0],
        "answer": values[0],
        "records": dict(zip(ids, values, strict=True)),
    }


def train_tasks(rng: np.random.Generator) -> dict[str, Any]:
    """A fresh training task from the env's seeded generator."""
    return draw_task(rng, "train")


def test_tasks() -> list[dict[str, Any]]:
    """The 60 held-out tasks, the same on every machine."""
    rng = np.random.default_rng(20261127)
    return [draw_task(rng, "test") for _ in range(NUM_TEST_TASKS)]


def check_split() -> None:
    """Raise if a held-out phrasing or id could occur in training."""
    for tool in PHRASINGS["test"]:
        if set(PHRASINGS["test"][tool]) & set(PHRASINGS["train"][tool]):
            raise AssertionError(f"a held-out phrasing of {tool} is also a training phrasing")
    low, high = ID_RANGES["train"]
    for task in test_tasks():
        if any(low <= int(i) < high for i in task["records"]):
            raise AssertionError(f"held-out task {task['request']!r} uses a training id")


# --------------------------------------------------------------------------- tools and grader
def _id_text(value: Any) -> str:
    return str(value).strip().lstrip("#").strip()


def run_tool(name: str, arguments: str, task: dict[str, Any]) -> str:
    """What the tool returns for ``arguments`` (JSON text), as JSON text or an error line."""
    if name not in TOOL_FIELDS:
        return f"Error: there is no tool named {name!r}."
    key, field = TOOL_FIELDS[name]
    args = json.loads(arguments)
    if key not in args:
        return f"Error: {name} needs the argument {key!r}."
    asked = _id_text(args[key])
    kind = "invoice" if name == "get_invoice_amount" else "order"
    if name != task["tool"] or asked not in task["records"]:
        return f"Error: no {kind} {asked}."
    return json.dumps({key: asked, field: task["records"][asked]})


def _amount(text: str) -> float:
    return float(text.replace("$", "").replace(",", ""))


def grade(answer: str, task: dict[str, Any]) -> bool:
    """Whether ``answer`` states the asked value: the amount as a number (``$482.17``,
    ``482.17 dollars``), or the date as month and day (``March 4``, ``March 4th``, ``4 March``);
    a different day or amount does not count."""
    if task["tool"] == "get_invoice_amount":
        numbers = re.findall(r"\d[\d,]*(?:\.\d+)?", answer)
        return any(_amount(n) == _amount(task["answer"]) for n in numbers)
    month, day = task["answer"].split()
    day_re = rf"0?{day}(?:st|nd|rd|th)?(?!\d)"
    pattern = rf"\b{month}\s+{day_re}|(?<!\d){day_re}\s+(?:of\s+)?{month}\b"
    return re.search(pattern, answer, re.IGNORECASE) is not None


def well_formed(tool_calls: list[Any] | None) -> bool:
    """At least one call, every one naming an offered tool (the parser already refused replies
    whose blocks are not JSON objects with object arguments)."""
    return bool(tool_calls) and all(c.function.name in OFFERED for c in tool_calls or [])


# --------------------------------------------------------------------------- the program
def lookup_program(
    example: list[dict[str, Any]],
) -> Callable[[dict[str, Any], Any], dict[str, float]]:
    """The program of each id: the system prompt, the ``example`` turns, the question."""

    def program(task: dict[str, Any], client: Any) -> dict[str, float]:
        messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
        messages += example
        messages.append({"role": "user", "content": task["request"]})
        first = client.chat.completions.create(model=AGENT, messages=messages, tools=TOOLS)
        message = first.choices[0].message
        calls = message.tool_calls or []
        parts = {"tool_call": float(well_formed(calls)), "right_call": 0.0}
        if parts["tool_call"]:
            name, arguments = calls[0].function.name, json.loads(calls[0].function.arguments)
            key = TOOL_FIELDS[name][0]
            right = name == task["tool"] and _id_text(arguments.get(key, "")) == task["id"]
            parts["right_call"] = float(right)
        if not calls:
            return {"success": float(grade(message.content or "", task)), **parts}
        messages.append(
            {
                "role": "assistant",
                "content": message.content or "",
                "tool_calls": [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.function.name, "arguments": c.function.arguments},
                    }
                    for c in calls
                ],
            }
        )
        for c in calls:
            result = run_tool(c.function.name, c.function.arguments, task)
            messages.append({"role": "tool", "tool_call_id": c.id, "content": result})
        second = client.chat.completions.create(model=AGENT, messages=messages, tools=TOOLS)
        return {"success": float(grade(second.choices[0].message.content or "", task)), **parts}

    return program


def register() -> None:
    """Register the three ids (idempotent)."""
    for env_id, example in EXAMPLES.items():
        if env_id in marft_envs.registry:
            continue
        marft_envs.register_program(
            env_id,
            lookup_program(example),
            agents=[AGENT],
            tasks=train_tasks,
            test_tasks=test_tasks(),
            tool_prompt="hermes",
            reward_weights=LOGGED_ONLY,
            max_calls=2,
            description="Answer a lookup question with one of two tools (benchmarks/tool_calls).",
        )


register()
