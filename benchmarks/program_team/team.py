"""The support desk: a team of LLM agents as production code writes it, and its tasks.

A router reads a customer request and hands it off as one JSON object ``{"route": ..., "reason":
...}``; the program parses it (anything it cannot parse, or a route that does not exist, is a
failed hand-off and the episode's answer is empty). Three specialists each hold the records of
their own department in their system prompt (billing: invoices; shipping: orders; accounts: user
accounts), so each can answer only its own kind of request. A reviewer sees the request, the
answer and the department's records, and approves the answer or sends it back once with a reason.

Reward parts (the team reward is ``success + cost``; the others are weighted 0 and logged, for
the transcripts' statistics):

=================  ==========================================================================
``success``        1 when the final answer states the asked value and no other record's value
                   of the same field (listing every record is not an answer)
``cost``           -0.02 per model call
``parsed``         1 when the router's reply held a JSON object with a known route
``routed``         1 when that route was the request's department
``approved``       1 when the reviewer approved the first answer
``false_approval`` 1 when it approved a first answer that was wrong
``false_rejection`` 1 when it sent back a first answer that was right
=================  ==========================================================================

Tasks come from a seeded generator: each episode draws fresh records (ids, names, amounts,
dates), and the request is one of several phrasings of a question about one field of one record.
The held-out split uses phrasings and names that never occur in training (checked by
:func:`check_split`). Fixed on 2026-11-25, before any tuned run; see README.md.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import numpy as np

import marft_envs

ENV_ID = "support-desk-v0"
AGENTS = ["router", "billing", "shipping", "accounts", "reviewer"]
DEPARTMENTS = ("billing", "shipping", "accounts")
COST_PER_CALL = 0.02

# --------------------------------------------------------------------------- the team's prompts
ROUTER = (
    "You are the router of a customer support desk. Departments: billing (invoices, amounts, due "
    "dates), shipping (orders, carriers, delivery status), accounts (user accounts, plans, "
    'emails). Reply with one JSON object and nothing else: {"route": "<department>", "reason": '
    '"<a few words>"}.'
)
#: One example exchange shown to the router before the request, as chat turns.
ROUTER_EXAMPLE = [
    {"role": "user", "content": "When is invoice 1234 due?"},
    {"role": "assistant", "content": '{"route": "billing", "reason": "invoice due date"}'},
]
SPECIALIST = (
    "You are the {department} specialist of a customer support desk. Answer the customer's "
    "question in one short sentence, using only these records:\n{records}"
)
REVIEWER = (
    "You review answers of a customer support desk against the records below. Reply APPROVE if "
    "the answer states the right value for the request, else REVISE and what is wrong.\n{records}"
)

# --------------------------------------------------------------------------- tasks
FIRST_NAMES = {
    "train": ["Ada", "Ben", "Chloe", "Dev", "Ema", "Finn", "Gus", "Hana", "Ivan", "Jade"],
    "test": ["Kai", "Lena", "Milo", "Nora", "Omar", "Pia", "Quinn", "Rosa", "Sami", "Tess"],
}
LAST_NAMES = {
    "train": ["Lee", "Moss", "Park", "Cole", "Diaz", "Ross"],
    "test": ["Vale", "Wong", "Yates", "Zhou", "Ortiz", "Banks"],
}
CARRIERS = ["UPS", "FedEx", "DHL", "USPS"]
STATUSES = ["in transit", "delivered", "delayed", "processing"]
PLANS = ["free", "basic", "pro", "team"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August"]

#: (department, field) -> phrasings; "{id}" / "{name}" / "{user}" are the record's keys.
TEMPLATES: dict[str, dict[tuple[str, str], list[str]]] = {
    "train": {
        ("billing", "amount"): [
            "How much do I owe on invoice {id}?",
            "What is the amount of invoice {id}?",
            "Invoice {id}: what's the total?",
        ],
        ("billing", "due"): [
            "When is invoice {id} due?",
            "What's the due date of invoice {id}?",
        ],
        ("shipping", "carrier"): [
            "Which carrier has order {id}?",
            "Who is shipping my order {id}?",
        ],
        ("shipping", "status"): [
            "What is the status of order {id}?",
            "Where is my order {id} now?",
        ],
        ("accounts", "plan"): [
            "Which plan is the account of {name} on?",
            "What subscription does {name} have?",
        ],
        ("accounts", "email"): [
            "What email is on file for {name}?",
            "Which email address does the account of {name} use?",
        ],
    },
    "test": {
        ("billing", "amount"): [
            "I need the balance of invoice {id}, please.",
            "Tell me the sum billed on invoice {id}.",
        ],
        ("billing", "due"): [
            "By what date must invoice {id} be paid?",
            "Invoice {id} - payment deadline?",
        ],
        ("shipping", "carrier"): [
            "Order {id} went out with which delivery company?",
            "Name the courier for order {id}.",
        ],
        ("shipping", "status"): [
            "Has order {id} arrived yet? What's its state?",
            "Give me an update on order {id}.",
        ],
        ("accounts", "plan"): [
            "{name} wants to know their current tier.",
            "Is {name} a paying customer? Which plan?",
        ],
        ("accounts", "email"): [
            "Look up the contact address of {name}.",
            "{name} forgot which email they signed up with.",
        ],
    },
}

RECORDS_PER_DEPARTMENT = 3


def _records(rng: np.random.Generator, split: str) -> dict[str, list[dict[str, str]]]:
    """One episode's records: three per department, with distinct keys and field values."""
    ids = rng.choice(np.arange(1000, 10000), size=2 * RECORDS_PER_DEPARTMENT, replace=False)
    first = rng.choice(FIRST_NAMES[split], size=RECORDS_PER_DEPARTMENT, replace=False)
    last = rng.choice(LAST_NAMES[split], size=RECORDS_PER_DEPARTMENT, replace=False)
    amounts = rng.choice(np.arange(20, 500), size=RECORDS_PER_DEPARTMENT, replace=False)
    days = rng.choice(np.arange(1, 29), size=RECORDS_PER_DEPARTMENT, replace=False)
    months = rng.choice(MONTHS, size=RECORDS_PER_DEPARTMENT, replace=False)
    n = RECORDS_PER_DEPARTMENT
    return {
        "billing": [
            {"id": str(ids[i]), "amount": f"${amounts[i]}", "due": f"{months[i]} {days[i]}"}
            for i in range(n)
        ],
        "shipping": [
            {
                "id": str(ids[n + i]),
                "carrier": str(c),
                "status": str(s),
            }
            for i, (c, s) in enumerate(
                zip(
                    rng.choice(CARRIERS, size=n, replace=False),
                    rng.choice(STATUSES, size=n, replace=False),
                    strict=True,
                )
            )
        ],
        "accounts": [
            {
                "name": f"{first[i]} {last[i]}",
                "plan": str(p),
                "email": f"{first[i].lower()}.{last[i].lower()}@example.com",
            }
            for i, p in enumerate(rng.choice(PLANS, size=n, replace=False))
        ],
    }


def records_text(department: str, rows: list[dict[str, str]]) -> str:
    """A department's records as the specialist and the reviewer read them."""
    if department == "billing":
        return "\n".join(f"- invoice {r['id']}: amount {r['amount']}, due {r['due']}" for r in rows)
    if department == "shipping":
        return "\n".join(
            f"- order {r['id']}: carrier {r['carrier']}, status {r['status']}" for r in rows
        )
    return "\n".join(f"- {r['name']}: plan {r['plan']}, email {r['email']}" for r in rows)


def make_tasks(split: str) -> Callable[[np.random.Generator], dict[str, Any]]:
    """A task drawer for one split (``"train"`` or ``"test"``), for ``register_program``."""

    def draw(rng: np.random.Generator) -> dict[str, Any]:
        records = _records(rng, split)
        keys = list(TEMPLATES[split])
        department, field = keys[int(rng.integers(len(keys)))]
        phrasings = TEMPLATES[split][(department, field)]
        template = phrasings[int(rng.integers(len(phrasings)))]
        row = records[department][int(rng.integers(RECORDS_PER_DEPARTMENT))]
        request = template.format(id=row.get("id", ""), name=row.get("name", ""))
        others = [r[field] for r in records[department] if r is not row]
        return {
            "request": request,
            "department": department,
            "field": field,
            "answer": row[field],
            "others": others,
            "records": {d: records_text(d, rows) for d, rows in records.items()},
        }

    return draw


def test_tasks(count: int = 200, seed: int = 20261125) -> list[dict[str, Any]]:
    """The fixed held-out tasks (a list, so every evaluation sees the same ones)."""
    rng = np.random.default_rng(seed)
    draw = make_tasks("test")
    return [draw(rng) for _ in range(count)]


def check_split() -> None:
    """The held-out phrasings and names never occur in training."""
    train_phrasings = {p for ps in TEMPLATES["train"].values() for p in ps}
    test_phrasings = {p for ps in TEMPLATES["test"].values() for p in ps}
    assert not train_phrasings & test_phrasings
    assert not set(FIRST_NAMES["train"]) & set(FIRST_NAMES["test"])
    assert not set(LAST_NAMES["train"]) & set(LAST_NAMES["test"])


# --------------------------------------------------------------------------- grading
def _norm(text: str) -> str:
    """Lower case, single spaces, no dollar signs (``$120`` and ``120 dollars`` both state 120)."""
    return re.sub(r"\s+", " ", text.lower().replace("$", "")).strip()


def _states(answer: str, value: str) -> bool:
    """The value appears in the answer as a whole token (``12`` does not state ``120``; ``March
    3rd`` states ``March 3``)."""
    pattern = r"(?<![\w@.])" + re.escape(_norm(value)) + r"(?:st|nd|rd|th)?(?![\w@])"
    return re.search(pattern, _norm(answer)) is not None


def grade(answer: str, task: dict[str, Any]) -> bool:
    """Success: the answer states the asked value, and no other record's value of that field."""
    return _states(answer, task["answer"]) and not any(_states(answer, o) for o in task["others"])


_JSON = re.compile(r"\{[^{}]*\}")


def parse_route(reply: str) -> str | None:
    """The route of the router's reply: the first JSON object in it whose ``route`` names a
    department (case and surrounding spaces ignored); None when there is none."""
    for block in _JSON.findall(reply):
        try:
            value = json.loads(block)
        except ValueError:
            continue
        if isinstance(value, dict) and isinstance(value.get("route"), str):
            route = value["route"].strip().lower()
            return route if route in DEPARTMENTS else None
    return None


# --------------------------------------------------------------------------- the program
def ask(client: Any, agent: str, system: str, user: str, example: list | None = None) -> str:
    messages = [{"role": "system", "content": system}, *(example or [])]
    messages.append({"role": "user", "content": user})
    reply = client.chat.completions.create(model=agent, messages=messages)
    return reply.choices[0].message.content or ""


def support_desk(task: dict[str, Any], client: Any, *, oracle_route: bool = False) -> dict:
    """One request through the desk; returns the reward parts.

    ``oracle_route=True`` skips the router and hands the request to the right department (the
    specialists' ceiling, for the baseline only).
    """
    parts = dict.fromkeys(
        ("parsed", "routed", "approved", "false_approval", "false_rejection"), 0.0
    )
    if oracle_route:
        route: str | None = task["department"]
    else:
        route = parse_route(ask(client, "router", ROUTER, task["request"], ROUTER_EXAMPLE))
    parts["parsed"] = float(route is not None)
    parts["routed"] = float(route == task["department"])
    answer = ""
    if route is not None:
        records = task["records"][route]
        specialist = SPECIALIST.format(department=route, records=records)
        answer = ask(client, route, specialist, task["request"])
        review = f"Request: {task['request']}\nAnswer: {answer}"
        verdict = ask(client, "reviewer", REVIEWER.format(records=records), review)
        first_right = grade(answer, task)
        approved = "REVISE" not in verdict.upper() and "APPROVE" in verdict.upper()
        parts["approved"] = float(approved)
        parts["false_approval"] = float(approved and not first_right)
        parts["false_rejection"] = float(not approved and first_right)
        if not approved:
            retry = f"{task['request']}\n\nA reviewer sent your answer back: {verdict}"
            answer = ask(client, route, specialist, retry)
    calls = sum(client.counts.calls.values())
    return {"success": float(grade(answer, task)), "cost": -COST_PER_CALL * calls, **parts}


def oracle_desk(task: dict[str, Any], client: Any) -> dict:
    return support_desk(task, client, oracle_route=True)


WEIGHTS = {
    "parsed": 0.0,
    "routed": 0.0,
    "approved": 0.0,
    "false_approval": 0.0,
    "false_rejection": 0.0,
}

ORACLE_ID = "support-desk-oracle-v0"


def register() -> None:
    """Register ``support-desk-v0`` and ``support-desk-oracle-v0`` (the benchmark's scripts call
    it; importing this module registers nothing)."""
    for env_id, program in ((ENV_ID, support_desk), (ORACLE_ID, oracle_desk)):
        if env_id in marft_envs.registry:
            continue
        marft_envs.register_program(
            env_id,
            program,
            agents=AGENTS,
            tasks=make_tasks("train"),
            test_tasks=test_tasks(),
            reward_weights=WEIGHTS,
            max_calls=8,
            description="Support desk: router -> billing/shipping/accounts specialist -> reviewer.",
        )
