"""Agent programs as envs: each model call one AEC step, the program's reward paid at its end,
failures ending only their episode."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from pettingzoo.test import api_test, seed_test

import marft_envs
from marft_envs.programs import EpisodeEnded, ProgramEnv, UnknownAgentError, combine_reward

TASKS = [{"q": f"question {i}", "gold": str(i)} for i in range(20)]


def planner_team(task, client):
    """Planner routes to a specialist; the critic approves or sends the answer back once."""
    route = client.chat.completions.create(
        model="planner",
        messages=[
            {"role": "system", "content": "Route the question: answer math or writer."},
            {"role": "user", "content": task["q"]},
        ],
    )
    specialist = "math" if "math" in (route.choices[0].message.content or "") else "writer"
    answer = (
        client.chat.completions.create(
            model=specialist, messages=[{"role": "user", "content": task["q"]}]
        )
        .choices[0]
        .message.content
    )
    verdict = (
        client.chat.completions.create(
            model="critic", messages=[{"role": "user", "content": f"{task['q']}\nAnswer: {answer}"}]
        )
        .choices[0]
        .message.content
    )
    if "no" in verdict:
        answer = (
            client.chat.completions.create(
                model=specialist, messages=[{"role": "user", "content": f"Try again: {task['q']}"}]
            )
            .choices[0]
            .message.content
        )
    calls = sum(client.counts.calls.values())
    return {"success": float(answer == task["gold"]), "cost": -0.05 * calls}


AGENTS = ["planner", "math", "writer", "critic"]


def make(program=planner_team, **kwargs):
    return ProgramEnv(program, kwargs.pop("agents", AGENTS), kwargs.pop("tasks", TASKS), **kwargs)


def play(env, reply, seed=0, options=None):
    """Run one episode, answering each call with ``reply(agent, messages)``."""
    env.reset(seed=seed, options=options)
    seen = []
    while env.agents:
        agent = env.agent_selection
        if env.terminations[agent] or env.truncations[agent]:
            env.step(None)
            continue
        messages = env.observe(agent)["messages"]
        seen.append((agent, messages))
        env.unwrapped.note_generation(7, 3, True)  # as a collector reports the policy's tokens
        env.step(reply(agent, messages))
    return seen


def test_each_call_is_one_step_of_the_named_agent_with_exactly_its_messages():
    env = make()
    seen = play(
        env,
        lambda agent, m: "math" if agent == "planner" else ("yes" if agent == "critic" else "0"),
    )
    assert [a for a, _ in seen] == ["planner", "math", "critic"]
    assert seen[0][1] == [
        {"role": "system", "content": "Route the question: answer math or writer."},
        {"role": "user", "content": env.task["q"]},
    ]
    record = env.history[-1]
    assert record.info["calls"] == {"planner": 1, "math": 1, "critic": 1}
    assert record.info["reward_parts"] == pytest.approx(
        {"success": float(env.task["gold"] == "0"), "cost": -0.15}
    )
    env.close()


def test_reward_parts_are_weighted_and_paid_to_every_agent_that_acted():
    env = make(reward_weights={"cost": 2.0})
    env.reset(seed=0, options={"index": 0})
    gold = env.task["gold"]
    rewards = {a: 0.0 for a in AGENTS}
    while env.agents:
        agent = env.agent_selection
        if env.terminations[agent] or env.truncations[agent]:
            env.step(None)
            continue
        env.step({"planner": "writer", "critic": "no"}.get(agent, gold))
        for a in AGENTS:
            rewards[a] += env.rewards.get(a, 0.0)
    team = 1.0 + 2.0 * (-0.05 * 4)  # success, four calls (the writer answered twice)
    assert env.history[-1].team_reward == pytest.approx(team)
    assert rewards == pytest.approx({"planner": team, "writer": team, "critic": team, "math": 0.0})
    assert env.history[-1].info["correct"] is True


def test_combine_reward_refuses_what_is_not_a_number():
    assert combine_reward(0.5, {}) == (0.5, {})
    assert combine_reward({"a": 1, "b": -0.5}, {"b": 2}) == (0.0, {"a": 1.0, "b": -0.5})
    for bad in ("1", None, True, float("nan"), {"a": "x"}, {}):
        with pytest.raises((TypeError, ValueError)):
            combine_reward(bad, {})


def test_a_program_that_raises_ends_its_episode_with_the_error_reward_and_the_error():
    def broken(task, client):
        client.chat.completions.create(model="planner", messages=[{"role": "user", "content": "x"}])
        raise RuntimeError("parser blew up")

    env = make(broken, error_reward=-1.0)
    play(env, lambda a, m: "anything")
    info = env.history[-1].info
    assert env.history[-1].team_reward == -1.0
    assert info["program_error"]["type"] == "RuntimeError"
    assert info["program_error"]["message"] == "parser blew up"
    assert info["program_error"]["agent"] == "planner" and info["program_error"]["call"] == 0
    assert "parser blew up" in info["program_error"]["traceback"]


def test_a_bad_return_value_is_a_program_error_not_a_reward():
    env = make(lambda task, client: _one_call(client) or "great")
    play(env, lambda a, m: "x")
    assert env.history[-1].info["program_error"]["type"] == "TypeError"
    assert env.history[-1].team_reward == 0.0


def _one_call(client, agent="planner"):
    client.chat.completions.create(model=agent, messages=[{"role": "user", "content": "hi"}])


def calls_an_unknown_agent(error_type, caught):
    """A program that calls agent "mathh", keeps the error it gets, and goes on."""

    def program(task, client):
        try:
            _one_call(client, "mathh")
        except error_type as err:
            caught["error"] = err
        _one_call(client)
        return 1.0

    return program


def test_a_call_for_an_unknown_agent_names_the_team():
    caught = {}
    play(make(calls_an_unknown_agent(UnknownAgentError, caught)), lambda a, m: "x")
    assert "'mathh'" in str(caught["error"]) and "planner" in str(caught["error"])


@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        ({"stream": True}, "stream"),
        ({"n": 2}, "n=2"),
        ({"tools": [{"type": "function"}]}, "tools"),
        ({"bogus": 1}, "bogus"),
    ],
)
def test_requests_marft_cannot_serve_exactly_are_refused_clearly(fields, needle):
    caught = {}

    def program(task, client):
        try:
            client.chat.completions.create(
                model="planner", messages=[{"role": "user", "content": "x"}], **fields
            )
        except (TypeError, ValueError) as err:
            caught["message"] = str(err)
        _one_call(client)
        return 0.0

    play(make(program), lambda a, m: "x")
    assert needle in caught["message"]


def test_a_hanging_program_times_out_and_its_late_call_is_refused():
    release = threading.Event()
    late = {}

    def hangs(task, client):
        _one_call(client)
        release.wait(5)
        try:
            _one_call(client)
        except EpisodeEnded as err:
            late["error"] = err
        return 1.0

    env = make(hangs, episode_timeout=0.2)
    play(env, lambda a, m: "x")
    assert env.history[-1].info["program_error"]["type"] == "Timeout"
    assert env.history[-1].team_reward == 0.0
    release.set()
    for _ in range(100):
        if late:
            break
        time.sleep(0.02)
    assert isinstance(late.get("error"), EpisodeEnded)


def test_a_program_without_calls_ends_at_reset_with_a_warning(caplog):
    env = make(lambda task, client: 1.0)
    with caplog.at_level("WARNING"):
        env.reset(seed=0)
    agent = env.agent_selection
    assert env.terminations[agent]
    assert env.infos[agent]["no_calls"] is True
    assert "without a model call" in caplog.text


def test_too_many_calls_truncate_the_episode():
    def chatty(task, client):
        while True:
            _one_call(client)

    env = make(chatty, max_calls=3)
    seen = play(env, lambda a, m: "x")
    assert len(seen) == 3
    assert env.history[-1].info["program_failure"] == "max_calls"


def test_async_programs_and_overlapping_calls():
    async def team(task, client):
        ask = client.aio.chat.completions.create
        a, b = await asyncio.gather(
            ask(model="math", messages=[{"role": "user", "content": "a"}]),
            ask(model="writer", messages=[{"role": "user", "content": "b"}]),
        )
        return float(a.choices[0].message.content == b.choices[0].message.content)

    env = make(team)
    seen = play(env, lambda a, m: "same")
    assert sorted(a for a, _ in seen) == ["math", "writer"]
    assert env.history[-1].team_reward == 1.0


def test_splits_hold_out_tasks_and_evaluation_pins_them():
    train, test = make(split="train"), make(split="test")
    assert len(test.dataset) == 2 and len(train.dataset) == 18
    assert not {t["q"] for t in train.dataset} & {t["q"] for t in test.dataset}
    explicit = make(test_tasks=[{"q": "held", "gold": "1"}], split="test")
    explicit.reset(seed=0, options={"index": 0})
    assert explicit.task["q"] == "held"


def test_register_program_makes_a_versioned_env(tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_text("\n".join(f'{{"q": "q{i}", "gold": "{i}"}}' for i in range(10)))
    marft_envs.register_program(
        "test-planner-team-v0", planner_team, agents=AGENTS, tasks=str(path)
    )
    try:
        env = marft_envs.make("test-planner-team-v0", split="test")
        assert env.unwrapped.dataset and env.possible_agents == AGENTS
        seen = play(env, lambda a, m: "writer" if a == "planner" else "yes")
        assert seen[0][0] == "planner"
    finally:
        del marft_envs.registry["test-planner-team-v0"]


def test_pettingzoo_api_and_seed_tests():
    def seeded(task, client):
        text = (
            client.chat.completions.create(
                model="planner",
                messages=[{"role": "user", "content": f"{task['q']} {client.rng.integers(100)}"}],
            )
            .choices[0]
            .message.content
        )
        if len(text) % 2:
            _one_call(client, "critic")
        return float(len(text) % 3 == 0)

    api_test(make(seeded), num_cycles=30)
    seed_test(lambda: make(seeded), num_cycles=30)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"episode_timeout": float("inf")},
        {"episode_timeout": True},
        {"episode_timeout": 0},
        {"error_reward": float("nan")},
        {"reward_weights": {"cost": float("nan")}},
        {"max_error_share": float("nan")},
        {"split": "validation"},
        {"transport": "grpc"},
    ],
)
def test_bad_settings_are_refused_by_name(kwargs):
    name = next(iter(kwargs))
    with pytest.raises(ValueError, match="cost" if name == "reward_weights" else name):
        make(**kwargs)


def test_drawn_training_tasks_with_a_held_out_list():
    draw = lambda rng: {"q": f"q{rng.integers(10)}", "gold": "0"}  # noqa: E731
    train = make(tasks=draw, test_tasks=[{"q": "held", "gold": "1"}])
    test = make(tasks=draw, test_tasks=[{"q": "held", "gold": "1"}], split="test")
    assert train.dataset is None and test.dataset == [{"q": "held", "gold": "1"}]
    train.reset(seed=3)
    assert train.task["q"].startswith("q")
