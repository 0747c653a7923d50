"""The support-desk benchmark's task, hand-off parser and grader (benchmarks/program_team)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "program_team"))
team = pytest.importorskip("team")

TASK = {
    "answer": "$120",
    "others": ["$12", "$300"],
}


@pytest.mark.parametrize(
    ("answer", "right"),
    [
        ("Invoice 4411 comes to $120.", True),
        ("You owe 120 dollars.", True),
        ("The amount is $120.00.", True),
        ("The amount is $12.", False),  # another record's value
        ("It is $1200.", False),
        ("Either $120 or $300.", False),  # listing values is not an answer
        ("I cannot help with that.", False),
    ],
)
def test_the_grader_pays_the_asked_value_alone(answer, right):
    assert team.grade(answer, TASK) is right


def test_dates_and_words():
    assert team.grade("It is due March 3rd.", {"answer": "March 3", "others": ["March 30"]})
    assert not team.grade("Due March 30.", {"answer": "March 3", "others": ["May 1"]})
    assert not team.grade("a professional plan", {"answer": "pro", "others": ["team"]})


@pytest.mark.parametrize(
    ("reply", "route"),
    [
        ('{"route": "billing", "reason": "invoice"}', "billing"),
        ('Sure! {"route": " Shipping ", "reason": "order"} done', "shipping"),
        ('{"route": "returns"}', None),
        ("billing", None),
        ('{"route": billing}', None),
        ('{"department": "billing"} {"route": "accounts"}', "accounts"),
    ],
)
def test_the_hand_off_parser(reply, route):
    assert team.parse_route(reply) == route


def test_the_held_out_split_shares_no_phrasing_or_name():
    team.check_split()
    test = team.test_tasks()
    assert len(test) == 200
    draw = team.make_tasks("train")
    rng = np.random.default_rng(0)
    train_requests = {draw(rng)["request"] for _ in range(2000)}
    assert not train_requests & {t["request"] for t in test}
    for t in test[:50]:  # each task's answer is in its department's records, once
        assert t["records"][t["department"]].count(t["answer"]) == 1
        assert t["answer"] not in t["others"]
