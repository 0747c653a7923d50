"""Failed agent-program episodes never pay: rewards must be finite floats, failures are dropped
from training by default, and a program in its own process cannot take the trainer down."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time

import pytest
from test_program_env import play

from marft_envs.programs import ProgramEnv, combine_reward
from marft_envs.programs.rewards import MAX_REWARD_PARTS

AGENTS = ["planner", "solver"]


def returns(value):
    def program(task, client):
        client.chat.completions.create(
            model="planner", messages=[{"role": "user", "content": task}]
        )
        return value

    return program


# ---------------------------------------------------------------------- rewards
@pytest.mark.parametrize(
    "value",
    [
        {"a": 1e308, "b": 1e308},  # each part finite, the sum is not
        10**400,  # float() overflows
        {"a": 10**400},
        float("inf"),
        float("nan"),
        "1.0",
        {"a": "x"},
        None,
        {f"part{i}": 0.0 for i in range(MAX_REWARD_PARTS + 1)},
    ],
)
def test_a_reward_that_is_not_a_finite_float_is_a_counted_program_error(value):
    env = ProgramEnv(returns(value), AGENTS, ["t"])
    play(env, lambda agent, messages: "ok")
    info = env.history[-1].info
    assert info["program_error"]["type"] in ("ValueError", "TypeError")
    assert env.history[-1].team_reward == env.error_reward
    assert "reward_parts" not in info


def test_the_reward_part_cap_is_named_and_configurable():
    many = {f"part{i}": 0.0 for i in range(70)}
    with pytest.raises(ValueError, match="max_reward_parts=64"):
        combine_reward(many, {})
    assert combine_reward(many, {}, max_parts=70)[0] == 0.0
    env = ProgramEnv(returns(many), AGENTS, ["t"], max_reward_parts=70)
    play(env, lambda agent, messages: "ok")
    assert len(env.history[-1].info["reward_parts"]) == 70


def test_weights_that_overflow_the_sum_are_refused():
    with pytest.raises(ValueError, match="finite"):
        combine_reward({"a": 1e300}, {"a": 1e300})


# ---------------------------------------------------------------------- failures never pay
def crashes(task, client):
    client.chat.completions.create(model="planner", messages=[{"role": "user", "content": task}])
    raise RuntimeError("boom")


def test_a_failed_episode_is_marked_for_dropping_by_default():
    env = ProgramEnv(crashes, AGENTS, ["t"])
    play(env, lambda agent, messages: "ok")
    info = env.history[-1].info
    assert info["program_error"]["type"] == "RuntimeError" and info["drop"] is True


def test_max_calls_truncation_is_dropped_too():
    def loops(task, client):
        while True:
            client.chat.completions.create(
                model="planner", messages=[{"role": "user", "content": task}]
            )

    env = ProgramEnv(loops, AGENTS, ["t"], max_calls=3)
    play(env, lambda agent, messages: "ok")
    info = env.history[-1].info
    assert info["program_failure"] == "max_calls" and info["drop"] is True


def test_on_error_reward_pays_error_reward_and_warns_when_failing_pays_more(caplog):
    finished = {"success": 0.0, "cost": -0.15}
    env = ProgramEnv(returns(finished), AGENTS, ["t"], on_error="reward", error_reward=0.0)
    with caplog.at_level(logging.WARNING, logger="marft_envs.programs.failures"):
        play(env, lambda agent, messages: "ok")
    assert "drop" not in env.history[-1].info
    assert any("failing pays more than finishing" in r.getMessage() for r in caplog.records)
    caplog.clear()
    env = ProgramEnv(returns(finished), AGENTS, ["t"], on_error="reward", error_reward=-1.0)
    with caplog.at_level(logging.WARNING, logger="marft_envs.programs.failures"):
        play(env, lambda agent, messages: "ok")
    assert not any("failing pays" in r.getMessage() for r in caplog.records)
    failed = ProgramEnv(crashes, AGENTS, ["t"], on_error="reward", error_reward=-1.0)
    play(failed, lambda agent, messages: "ok")
    assert failed.history[-1].team_reward == -1.0 and "drop" not in failed.history[-1].info


# ---------------------------------------------------------------------- isolation


def exits_hard(task, client):
    client.chat.completions.create(model="planner", messages=[{"role": "user", "content": task}])
    os._exit(3)


def crashes_the_interpreter(task, client):
    client.chat.completions.create(model="planner", messages=[{"role": "user", "content": task}])
    import ctypes

    ctypes.string_at(0)  # a segmentation fault


@pytest.mark.parametrize("transport", ["inprocess", "http"])
@pytest.mark.parametrize("program", [exits_hard, crashes_the_interpreter])
def test_a_program_that_kills_its_process_fails_only_its_episode(program, transport):
    if transport == "http":
        pytest.importorskip("uvicorn")
    env = ProgramEnv(program, AGENTS, ["t"], isolation="process", transport=transport)
    try:
        play(env, lambda agent, messages: "ok")
        error = env.history[-1].info["program_error"]
        assert error["type"] == "ProgramExited"
        assert env.history[-1].info["drop"] is True
        # The trainer's process goes on: the next episode runs.
        env.program = returns(1.0)
        play(env, lambda agent, messages: "ok", seed=1)
        assert env.history[-1].team_reward == 1.0
    finally:
        env.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (ended, not yet reaped by its parent) counts as gone.
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(")")[-1].split()[0] != "Z"


@pytest.mark.parametrize("transport", ["inprocess", "http"])
def test_a_process_the_program_starts_ends_with_its_episode(transport, tmp_path):
    if transport == "http":
        pytest.importorskip("uvicorn")
    pid_file = tmp_path / "pid"

    def starts_a_child(task, client):
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        pid_file.write_text(str(child.pid))
        answer = client.chat.completions.create(
            model="planner", messages=[{"role": "user", "content": task}]
        )
        solver = client.chat.completions.create(
            model="solver",
            messages=[{"role": "user", "content": answer.choices[0].message.content}],
        )
        return {
            "success": float(solver.choices[0].message.content == "ok"),
            "cost": -0.01 * sum(client.counts.calls.values()),
        }

    env = ProgramEnv(starts_a_child, AGENTS, ["t"], isolation="process", transport=transport)
    try:
        play(env, lambda agent, messages: "ok")
        info = env.history[-1].info
        # Calls, counts and the reward cross the process boundary exactly.
        assert info["calls"] == {"planner": 1, "solver": 1}
        assert info["reward_parts"] == pytest.approx({"success": 1.0, "cost": -0.02})
        pid = int(pid_file.read_text())
        deadline = time.monotonic() + 10
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(pid)
    finally:
        env.close()


def test_an_async_program_in_a_process_overlaps_its_calls():
    import asyncio

    async def fan_out(task, client):
        replies = await asyncio.gather(
            *(
                client.aio.chat.completions.create(
                    model=agent, messages=[{"role": "user", "content": agent}]
                )
                for agent in AGENTS
            )
        )
        return float(all(r.choices[0].message.content == "ok" for r in replies))

    env = ProgramEnv(fan_out, AGENTS, ["t"], isolation="process")
    try:
        seen = play(env, lambda agent, messages: "ok")
        assert sorted(a for a, _ in seen) == AGENTS
        assert env.history[-1].team_reward == 1.0
    finally:
        env.close()


def test_many_episodes_in_a_row_in_processes_never_lose_a_call():
    """Each episode's pipe is read by its own relay only (a closed pipe's descriptor is reused
    by the next episode's)."""
    env = ProgramEnv(returns(1.0), AGENTS, ["t"], isolation="process", episode_timeout=10)
    try:
        for seed in range(25):
            play(env, lambda agent, messages: "ok", seed=seed)
            assert env.history[-1].team_reward == 1.0, env.history[-1].info
    finally:
        env.close()


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [({"tasks": []}, "tasks"), ({"tasks": ["t"], "test_tasks": [], "split": "test"}, "test_tasks")],
)
def test_an_empty_task_list_is_refused_naming_its_argument(kwargs, name):
    with pytest.raises(ValueError, match=rf"^{name}=\[\] holds no tasks"):
        ProgramEnv(returns(1.0), AGENTS, **kwargs)


@pytest.mark.parametrize("isolation", ["thread", "process"])
def test_too_many_overlapping_calls_in_process_are_refused_and_fail_the_episode(isolation):
    import asyncio

    from marft_envs.wire import RequestRefused

    async def fan_out(task, client):
        replies = await asyncio.gather(
            *(
                client.aio.chat.completions.create(
                    model="planner", messages=[{"role": "user", "content": str(i)}]
                )
                for i in range(5)
            ),
            return_exceptions=True,
        )
        refused = [r for r in replies if isinstance(r, RequestRefused)]
        assert refused and all(r.status == 429 for r in refused)
        return 1.0

    env = ProgramEnv(fan_out, AGENTS, ["t"], max_concurrent_calls=2, isolation=isolation)
    try:
        # The first call is answered only once the others were refused (or after 30 s).
        def answer_after_the_refusal(agent, messages):
            deadline = time.monotonic() + 30
            while not env.unwrapped._run.refusals and time.monotonic() < deadline:
                time.sleep(0.02)
            return "ok"

        play(env, answer_after_the_refusal)
        error = env.history[-1].info["program_error"]
        assert error["type"] == "TooManyCalls" and "max_concurrent_calls=2" in error["message"]
    finally:
        env.close()


def reports_its_parent(task, client):
    client.chat.completions.create(model="planner", messages=[{"role": "user", "content": task}])
    return {"parent": float(os.getppid())}


def test_an_importable_program_is_forked_from_the_zygote_and_a_closure_from_the_trainer():
    from marft_envs.programs import zygote

    def closure(task, client):
        return reports_its_parent(task, client)

    parents = {}
    for name, program in (("module", reports_its_parent), ("closure", closure)):
        env = ProgramEnv(program, AGENTS, ["t"], isolation="process")
        try:
            play(env, lambda agent, messages: "ok")
            parents[name] = env.history[-1].info["reward_parts"]["parent"]
        finally:
            env.close()
    assert parents["module"] == zygote._ZYGOTE._process.pid != os.getpid()
    assert parents["closure"] == os.getpid()


def test_a_dead_zygote_is_replaced():
    from marft_envs.programs import zygote

    env = ProgramEnv(reports_its_parent, AGENTS, ["t"], isolation="process")
    try:
        play(env, lambda agent, messages: "ok")
        first = zygote._ZYGOTE._process
        first.kill()
        first.wait()
        play(env, lambda agent, messages: "ok", seed=1)
        assert env.history[-1].info["reward_parts"]["parent"] == zygote._ZYGOTE._process.pid
        assert zygote._ZYGOTE._process.pid != first.pid
    finally:
        env.close()


def starts_a_sleeper(task, client):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    client.chat.completions.create(model="planner", messages=[{"role": "user", "content": task}])
    return {"sleeper": float(child.pid)}


def test_a_process_started_by_a_zygote_child_ends_with_its_episode():
    env = ProgramEnv(starts_a_sleeper, AGENTS, ["t"], isolation="process")
    try:
        play(env, lambda agent, messages: "ok")
        pid = int(env.history[-1].info["reward_parts"]["sleeper"])
        deadline = time.monotonic() + 10
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(pid)
    finally:
        env.close()


def test_the_failing_pays_more_warning_is_given_once_per_program_not_per_env_copy(caplog):
    def cheap(task, client):
        client.chat.completions.create(model="planner", messages=[{"role": "user", "content": "q"}])
        return -0.5

    copies = [
        ProgramEnv(cheap, AGENTS, ["t"], on_error="reward", error_reward=0.0) for _ in range(8)
    ]
    with caplog.at_level(logging.WARNING, logger="marft_envs.programs.failures"):
        for env in copies:  # a rollout's copies, then the evaluation's, each ending episodes
            for seed in range(3):
                play(env, lambda agent, messages: "ok", seed=seed)
    warned = [r for r in caplog.records if "failing pays more" in r.getMessage()]
    assert len(warned) == 1
