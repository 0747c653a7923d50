"""``episode_timeout`` is the program's own clock, kept from the episode's start whatever the env
is doing: k programs that hang at once cost about one timeout, not k."""

from __future__ import annotations

import threading
import time
from typing import NamedTuple

import pytest

from marft_algos.rollout.collector import RolloutCollector
from marft_envs.programs import ProgramEnv

AGENTS = ["planner", "solver"]
TIMEOUT = 1.0
HUNG = 6


class Gen(NamedTuple):
    prompt_ids: list[int]
    action_ids: list[int]
    log_probs: list[float]
    text: str
    finished: bool


class Replies:
    """Answers every call with "ok" at once."""

    def generate(self, agent, messages_batch, settings, *, generator=None):
        return [Gen([1], [2], [-0.1], "ok", True) for _ in messages_batch]


def _call(client):
    client.chat.completions.create(model="planner", messages=[{"role": "user", "content": "hi"}])


@pytest.fixture
def release():
    event = threading.Event()
    yield event
    event.set()  # the hung programs' threads end with the test


@pytest.mark.parametrize("where", ["after_a_call", "before_any_call"])
def test_hung_episodes_time_out_together_not_one_after_another(release, where):
    started: list[float] = []

    def hangs(task, client):
        started.append(time.monotonic())
        if where == "after_a_call":
            _call(client)
        release.wait(30)
        return 1.0

    envs = [
        ProgramEnv(hangs, AGENTS, ["t"], episode_timeout=TIMEOUT, max_error_share=1)
        for _ in range(HUNG)
    ]
    collector = RolloutCollector(Replies(), envs)
    begin = time.monotonic()
    episodes = collector.collect(HUNG)
    took = time.monotonic() - begin
    collector.close()
    errors = [e.info.get("program_error", {}).get("type") for e in episodes]
    assert errors == ["Timeout"] * HUNG
    # One after another they would take HUNG timeouts; together about one. The programs all
    # started within a fraction of a timeout of each other, and the whole rollout stays far
    # below HUNG timeouts (a bound that holds on a loaded machine).
    assert max(started) - min(started) < 0.5 * TIMEOUT
    assert took < 0.6 * HUNG * TIMEOUT


def test_a_program_that_stalls_past_its_budget_fails_even_when_the_env_looks_late():
    def stalls(task, client):
        _call(client)
        time.sleep(0.4)  # past the 0.2 s budget, while the env is busy elsewhere
        _call(client)
        return 1.0

    env = ProgramEnv(stalls, AGENTS, ["t"], episode_timeout=0.2)
    env.reset(seed=0)
    env.unwrapped.prepare_step("ok")
    time.sleep(0.6)  # the env attends to other copies; the program's second call is queued
    env.step("ok")
    assert env.history[-1].info["program_error"]["type"] == "Timeout"


def test_model_time_does_not_count_toward_episode_timeout():
    def two_calls(task, client):
        _call(client)
        _call(client)
        return 1.0

    env = ProgramEnv(two_calls, AGENTS, ["t"], episode_timeout=0.3)
    env.reset(seed=0)
    for _ in range(2):
        time.sleep(0.4)  # the policy's generation: the program waits for its reply
        env.step("ok")
    assert "program_error" not in env.history[-1].info
    assert env.history[-1].team_reward == 1.0
