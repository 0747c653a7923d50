"""support-desk-v2 (benchmarks/program_team/team_v2.py): it registers, its held-out split holds,
and its program pays a right answer and refuses wrong ones, played with stub replies."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "program_team"))
team_v2 = pytest.importorskip("team_v2")
team = pytest.importorskip("team")

from desk_episodes import play_rewards  # noqa: E402

import marft_envs  # noqa: E402


def copy_the_record(messages) -> str:
    """A specialist that copies the line of its records naming the request's invoice, order or
    customer, or its first line when none does (what a wrong department's specialist can do)."""
    records = messages[0]["content"].splitlines()[1:-1]
    request = messages[-1]["content"]
    keys = re.findall(r"\d{4}|[A-Z][a-z]+ [A-Z][a-z]+", request)
    for line in records:
        if any(line.startswith((f"- invoice {k}:", f"- order {k}:", f"- {k}:")) for k in keys):
            return line
    return records[0]


def stub(route_to, verdict="APPROVE"):
    """Replies ``reply(agent, messages)``: the router sends every ticket to ``route_to(task)``."""

    def reply(task, agent, messages):
        if agent == "router":
            return json.dumps({"route": route_to(task)})
        if agent == "reviewer":
            return verdict
        return copy_the_record(messages)

    return reply


class Client:
    """The client surface ``team_v2.desk`` calls, answering with ``reply(task, agent, msgs)``."""

    def __init__(self, task, reply):
        self.calls = []
        create = self._create
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=create))
        self.task, self.reply = task, reply

    def _create(self, *, model, messages):
        self.calls.append(model)
        text = self.reply(self.task, model, messages)
        return SimpleNamespace(choices=[SimpleNamespace(message=SimpleNamespace(content=text))])


def tickets(count=60, seed=0):
    rng = np.random.default_rng(seed)
    draw = team_v2.make_tasks("train")
    return [draw(rng) for _ in range(count)]


def test_every_env_registers_with_its_agents():
    team_v2.register()
    for env_id, agents in (
        (team_v2.ENV_ID, team_v2.AGENTS),
        (team_v2.ORACLE_ID, team_v2.AGENTS),
        (team_v2.SINGLE_ID, [team_v2.SINGLE_AGENT]),
    ):
        assert env_id in marft_envs.registry
        env = marft_envs.make(env_id, split="train")
        assert env.possible_agents == agents
        env.close()


def test_the_single_desk_makes_every_call_as_one_agent_with_the_same_prompts():
    t = tickets(1)[0]
    team_seen, single_seen = [], []

    def recording(seen):
        def reply(task, agent, messages):
            seen.append(messages)
            role = "router" if len(seen) == 1 else ("reviewer" if len(seen) == 3 else "x")
            return stub(lambda x: x["department"], verdict="REVISE")(task, role, messages)

        return reply

    team_client, single_client = Client(t, recording(team_seen)), Client(t, recording(single_seen))
    assert team_v2.desk(t, team_client) == team_v2.single_desk(t, single_client)
    assert single_client.calls == [team_v2.SINGLE_AGENT] * 4
    assert team_client.calls == ["router", t["department"], "reviewer", t["department"]]
    assert single_seen == team_seen


def test_the_held_out_split_shares_no_phrasing_or_name():
    team_v2.check_split()
    test = team_v2.test_tasks()
    assert len(test) == 200
    assert {t["department"] for t in test} == set(team_v2.DEPARTMENTS)
    train_requests = {t["request"] for t in tickets(2000)}
    assert not train_requests & {t["request"] for t in test}


def test_only_the_right_department_holds_the_answer():
    for t in tickets():
        lines = t["records"][t["department"]].splitlines()
        assert sum(team._states(line, t["answer"]) for line in lines) == 1  # as the grader reads
        others = [d for d in team_v2.DEPARTMENTS if d != t["department"]]
        assert not any(team._states(t["records"][d], t["answer"]) for d in others)
        assert t["answer"] not in t["others"]


def test_the_right_route_pays_and_a_wrong_one_cannot():
    for t in tickets():
        right = team_v2.desk(t, Client(t, stub(lambda task: task["department"])))
        assert right["success"] == right["routed"] == right["approved"] == 1.0
        wrong_department = next(d for d in team_v2.DEPARTMENTS if d != t["department"])
        wrong = team_v2.desk(t, Client(t, stub(lambda task, d=wrong_department: d)))
        assert wrong["success"] == wrong["routed"] == 0.0
        assert wrong["parsed"] == 1.0 and wrong["false_approval"] == 1.0


@pytest.mark.parametrize(
    ("answer", "right"),
    [
        ("It is {answer}.", True),
        ("It is {other}.", False),  # the other record's value
        ("Either {answer} or {other}.", False),  # listing the records is not an answer
        ("I cannot help with that.", False),
    ],
)
def test_the_grader_pays_the_asked_value_alone(answer, right):
    for t in tickets(12):
        text = answer.format(answer=t["answer"], other=t["others"][0])
        assert team_v2.grade(text, t) is right


def test_a_rejected_answer_is_retried_with_the_rejected_answer_shown():
    t = tickets(1)[0]
    seen = []

    def reply(task, agent, messages):
        seen.append((agent, messages))
        if agent == "router":
            return json.dumps({"route": task["department"]})
        if agent == "reviewer":
            return "REVISE"
        return "no idea" if len(seen) == 2 else f"It is {task['answer']}."

    client = Client(t, reply)
    parts = team_v2.desk(t, client)
    assert client.calls == ["router", t["department"], "reviewer", t["department"]]
    assert parts["success"] == 1.0 and parts["false_rejection"] == 0.0
    assert seen[-1][1][-2] == {"role": "assistant", "content": "no idea"}
    assert seen[-1][1][-1]["content"] == team_v2.RETRY.format(request=t["request"])


def test_an_unparsed_hand_off_ends_the_episode_unpaid():
    t = tickets(1)[0]
    client = Client(t, lambda task, agent, messages: "billing, I think")
    parts = team_v2.desk(t, client)
    assert client.calls == ["router"]
    assert parts["success"] == parts["parsed"] == 0.0
    assert team_v2.team_reward(parts) == 0.0


def test_the_env_pays_the_team_reward_at_the_episode_end():
    team_v2.register()
    env = marft_envs.make(team_v2.ENV_ID, split="train")
    env.reset(seed=3)
    task = env.unwrapped.task
    reply = stub(lambda x: x["department"])
    rewards = play_rewards(env, lambda agent, messages: reply(task, agent, messages))
    assert rewards["router"] == rewards["reviewer"] == rewards[task["department"]] == 1.0
    env.close()
