"""The tickets of ``support-desk-v2``: a seeded generator, its held-out split, the grader.

Every ticket draws fresh records: two per department (billing: invoices; shipping: orders;
accounts: customers). Every field's value is drawn per ticket and none can be worked out from
the request: amounts, dates (distinct over the ticket's six records), tracking and member codes.
So a specialist of the wrong department, which sees only its own department's records, cannot
state the asked value except by an unlikely guess (v1's carriers, statuses and plans were one of
four words, and its emails were the customer's name at example.com).

The held-out split uses other phrasings and other names (:func:`check_split`), and its 200 tasks
are a fixed list drawn with ``TEST_SEED``. Grading and hand-off parsing are v0's
(``team.grade``, ``team.parse_route``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import team

DEPARTMENTS = team.DEPARTMENTS
TEST_SEED = 20261128
RECORDS_PER_DEPARTMENT = 2

grade = team.grade
parse_route = team.parse_route

FIRST_NAMES = team.FIRST_NAMES
LAST_NAMES = team.LAST_NAMES
MONTHS = team.MONTHS

#: (department, field) -> phrasings; "{id}" / "{name}" are the record's keys.
TEMPLATES: dict[str, dict[tuple[str, str], list[str]]] = {
    "train": {
        ("billing", "amount"): [
            "How much do I owe on invoice {id}?",
            "What is the amount of invoice {id}?",
        ],
        ("billing", "due"): [
            "When is invoice {id} due?",
            "What's the due date of invoice {id}?",
        ],
        ("shipping", "tracking"): [
            "What is the tracking code of order {id}?",
            "Give me the tracking code for order {id}.",
        ],
        ("shipping", "arrives"): [
            "When does order {id} arrive?",
            "What day will order {id} be delivered?",
        ],
        ("accounts", "member"): [
            "What is the member code of {name}?",
            "Give me the member code for {name}.",
        ],
        ("accounts", "renews"): [
            "When does the plan of {name} renew?",
            "What's the renewal date for {name}?",
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
        ("shipping", "tracking"): [
            "Order {id}: which code can I track it with?",
            "Send me the parcel code for order {id}.",
        ],
        ("shipping", "arrives"): [
            "Order {id} - expected delivery day?",
            "On what date should order {id} reach me?",
        ],
        ("accounts", "member"): [
            "{name} lost their membership code. What is it?",
            "Read me the member code on the account of {name}.",
        ],
        ("accounts", "renews"): [
            "Until when does the subscription of {name} run?",
            "On which day is {name} up for renewal?",
        ],
    },
}


def _records(rng: np.random.Generator, split: str) -> dict[str, list[dict[str, str]]]:
    """One ticket's records: two per department, every key and value distinct."""
    n = RECORDS_PER_DEPARTMENT
    ids = rng.choice(np.arange(1000, 10000), size=2 * n, replace=False)
    amounts = rng.choice(np.arange(100, 1000), size=n, replace=False)
    days = rng.choice(np.arange(1, 29), size=3 * n, replace=False)
    months = rng.choice(MONTHS, size=3 * n)
    dates = [f"{months[i]} {days[i]}" for i in range(3 * n)]
    codes = rng.choice(np.arange(10000, 100000), size=2 * n, replace=False)
    first = rng.choice(FIRST_NAMES[split], size=n, replace=False)
    last = rng.choice(LAST_NAMES[split], size=n, replace=False)
    return {
        "billing": [
            {"id": str(ids[i]), "amount": f"${amounts[i]}", "due": dates[i]} for i in range(n)
        ],
        "shipping": [
            {"id": str(ids[n + i]), "tracking": f"TR{codes[i]}", "arrives": dates[n + i]}
            for i in range(n)
        ],
        "accounts": [
            {
                "name": f"{first[i]} {last[i]}",
                "member": f"AC{codes[n + i]}",
                "renews": dates[2 * n + i],
            }
            for i in range(n)
        ],
    }


def records_text(department: str, rows: list[dict[str, str]]) -> str:
    """A department's records as its specialist and the reviewer read them."""
    if department == "billing":
        return "\n".join(f"- invoice {r['id']}: amount {r['amount']}, due {r['due']}" for r in rows)
    if department == "shipping":
        return "\n".join(
            f"- order {r['id']}: tracking {r['tracking']}, arrives {r['arrives']}" for r in rows
        )
    return "\n".join(
        f"- {r['name']}: member code {r['member']}, renews {r['renews']}" for r in rows
    )


def make_tasks(split: str) -> Callable[[np.random.Generator], dict[str, Any]]:
    """A task drawer for one split (``"train"`` or ``"test"``), for ``register_program``."""
    if split not in TEMPLATES:
        raise ValueError(f"split must be one of {sorted(TEMPLATES)}, got {split!r}.")

    def draw(rng: np.random.Generator) -> dict[str, Any]:
        records = _records(rng, split)
        keys = list(TEMPLATES[split])
        department, field = keys[int(rng.integers(len(keys)))]
        phrasings = TEMPLATES[split][(department, field)]
        template = phrasings[int(rng.integers(len(phrasings)))]
        row = records[department][int(rng.integers(RECORDS_PER_DEPARTMENT))]
        request = template.format(id=row.get("id", ""), name=row.get("name", ""))
        return {
            "request": request,
            "department": department,
            "field": field,
            "answer": row[field],
            "others": [r[field] for r in records[department] if r is not row],
            "records": {d: records_text(d, rows) for d, rows in records.items()},
        }

    return draw


def test_tasks(count: int = 200, seed: int = TEST_SEED) -> list[dict[str, Any]]:
    """The fixed held-out tasks (a list, so every evaluation sees the same ones)."""
    rng = np.random.default_rng(seed)
    draw = make_tasks("test")
    return [draw(rng) for _ in range(count)]


def check_split() -> None:
    """The held-out phrasings and names never occur in training.

    Raises:
        AssertionError: A phrasing, a first name or a last name is in both splits.
    """
    train = {p for ps in TEMPLATES["train"].values() for p in ps}
    test = {p for ps in TEMPLATES["test"].values() for p in ps}
    assert not train & test, f"phrasings in both splits: {sorted(train & test)}"
    assert not set(FIRST_NAMES["train"]) & set(FIRST_NAMES["test"]), "first names overlap"
    assert not set(LAST_NAMES["train"]) & set(LAST_NAMES["test"]), "last names overlap"
    assert set(TEMPLATES["train"]) == set(TEMPLATES["test"]), "the splits ask other fields"
