"""The agent-program endpoint at its defaults: closed to other local processes and browser pages,
never starved by one episode, and bounded (requests refused with a status and counted as the
episode's program error)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import time

import pytest

pytest.importorskip("openai", reason="the HTTP transport needs the agents extra (openai)")
pytest.importorskip("uvicorn", reason="the HTTP transport needs the agents extra (uvicorn)")
pytest.importorskip("starlette", reason="the HTTP transport needs the agents extra (starlette)")

import httpx
import openai
from test_program_env import play

from marft_envs.programs import ProgramEnv
from marft_envs.wire.http import allowed_host

AGENTS = ["planner", "solver"]


def two_calls(task, client):
    first = client.chat.completions.create(
        model="planner", messages=[{"role": "user", "content": task}]
    )
    second = client.chat.completions.create(
        model="solver", messages=[{"role": "user", "content": first.choices[0].message.content}]
    )
    return {
        "success": float(second.choices[0].message.content == "ok"),
        "cost": -0.01 * sum(client.counts.calls.values()),
    }


def _base_url(env) -> str:
    return env.unwrapped._transport.episode_url


# ---------------------------------------------------------------------- who may call
ATTACKER = r"""
import json, sys, httpx
port, secret = int(sys.argv[1]), sys.argv[2]
base = f"http://127.0.0.1:{port}"
body = {"model": "planner", "messages": [{"role": "user", "content": "injected"}]}
statuses = []
with httpx.Client(timeout=5) as http:
    for i in range(64):  # sequential ids, as the endpoint used to hand out
        for key in (f"e{i}", str(i)):
            statuses.append(http.post(f"{base}/episodes/{key}/v1/chat/completions", json=body).status_code)
            statuses.append(http.get(f"{base}/episodes/{key}/v1/models").status_code)
    url = f"{base}/episodes/{secret}/v1/chat/completions"
    # What a web page can send without a preflight: text/plain, its own Host.
    statuses.append(http.post(url, content=json.dumps(body), headers={"content-type": "text/plain"}).status_code)
    statuses.append(http.post(url, json=body, headers={"host": "evil.example:80"}).status_code)
    statuses.append(http.post(url, json=body, headers={"host": f"attacker.test:{port}"}).status_code)
print(json.dumps(statuses))
"""


def test_another_process_that_knows_the_port_gets_no_2xx_and_changes_nothing():
    env = ProgramEnv(two_calls, AGENTS, ["t"], transport="http")
    try:
        env.reset(seed=0)  # the program now waits in its first call
        url = _base_url(env)
        port, secret = env.unwrapped._transport.server.port, url.rstrip("/").split("/")[-2]
        assert len(secret) >= 40  # secrets.token_urlsafe(32)
        out = subprocess.run(
            [sys.executable, "-c", ATTACKER, str(port), secret],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        statuses = json.loads(out.stdout)
        assert statuses and all(not 200 <= s < 300 for s in statuses), statuses
        assert statuses[-3:] == [415, 403, 403]
        while env.agents:  # the episode goes on as if nobody had knocked
            agent = env.agent_selection
            if env.terminations[agent] or env.truncations[agent]:
                env.step(None)
                continue
            assert "injected" not in json.dumps(env.observe(agent)["messages"])
            env.unwrapped.note_generation(5, 1, True)
            env.step("ok")
        info = env.history[-1].info
        assert info["calls"] == {"planner": 1, "solver": 1}
        assert info["reward_parts"] == pytest.approx({"success": 1.0, "cost": -0.02})
        assert "program_error" not in info
        assert len(env.history) == 2
    finally:
        env.close()


def test_each_episode_gets_its_own_secret():
    env = ProgramEnv(two_calls, AGENTS, ["t"], transport="http")
    try:
        urls = set()
        for seed in range(3):
            env.reset(seed=seed)
            urls.add(_base_url(env))
        assert len(urls) == 3
    finally:
        env.close()


@pytest.mark.parametrize(
    ("host", "ok"),
    [
        ("127.0.0.1:8000", True),
        ("localhost:8000", True),
        ("127.0.0.1", True),
        ("[::1]:8000", True),
        ("127.0.0.1:8001", False),
        ("evil.example:8000", False),
        ("127.0.0.1.evil.example:8000", False),
        ("", False),
        (None, False),
    ],
)
def test_only_loopback_host_headers_are_served(host, ok):
    assert allowed_host(host, 8000) is ok


def test_a_call_after_the_episode_ended_gets_409():
    caught = {}

    def late(task, client):
        done = client.chat.completions.create(
            model="planner", messages=[{"role": "user", "content": task}]
        )
        caught["client"] = client
        return float(done.choices[0].message.content == "ok")

    env = ProgramEnv(late, AGENTS, ["t"], transport="http")
    try:
        play(env, lambda agent, messages: "ok")
        with pytest.raises(openai.APIStatusError) as err:
            caught["client"].chat.completions.create(
                model="planner", messages=[{"role": "user", "content": "again"}]
            )
        assert err.value.status_code == 409
    finally:
        env.close()


# ---------------------------------------------------------------------- concurrency
# 128 concurrent HTTP episodes: tests/algos/trainers/test_program_training.py, on the built-in
# model through the collector.
def test_a_flood_into_one_episode_is_refused_and_never_starves_another():
    flood_result = {}

    def flood(task, client):
        url = f"{client.base_url}chat/completions"
        body = {"model": "planner", "messages": [{"role": "user", "content": "x"}]}
        headers = {"authorization": f"Bearer {client.api_key}"}

        async def burst():  # one client's pool stays small: httpx queues in O(n^2)
            async with httpx.AsyncClient(timeout=60) as http:
                responses = await asyncio.gather(
                    *(http.post(url, json=body, headers=headers) for _ in range(100)),
                    return_exceptions=True,
                )
            return [r.status_code if isinstance(r, httpx.Response) else 0 for r in responses]

        async def storm():
            return [s for part in await asyncio.gather(*(burst() for _ in range(10))) for s in part]

        flood_result["statuses"] = asyncio.run(storm())
        return 0.0

    flooded = ProgramEnv(flood, AGENTS, ["t"], transport="http", episode_timeout=120)
    normal = ProgramEnv(two_calls, AGENTS, ["t"], transport="http", episode_timeout=30)
    try:
        flooded.reset(seed=0)
        start = time.monotonic()
        play(normal, lambda agent, messages: "ok")
        assert time.monotonic() - start < 30
        info = normal.history[-1].info
        assert "program_error" not in info and info["reward_parts"]["success"] == 1.0
        # Nobody answers the flooded episode meanwhile: past its 16 waiting calls it refuses.
        deadline = time.monotonic() + 60
        while not flooded.unwrapped._run.refusals and time.monotonic() < deadline:
            time.sleep(0.05)
        # The flooded episode answers the calls it took in, then fails for the ones it refused.
        while flooded.agents:
            agent = flooded.agent_selection
            if flooded.terminations[agent] or flooded.truncations[agent]:
                flooded.step(None)
                continue
            flooded.unwrapped.note_generation(5, 1, True)
            flooded.step("ok")
        deadline = time.monotonic() + 60  # the storm's late answers (409 once the episode ended)
        while "statuses" not in flood_result and time.monotonic() < deadline:
            time.sleep(0.05)
        statuses = flood_result["statuses"]
        assert len(statuses) == 1000
        # At most max_concurrent_calls wait at once, within max_calls; the others are refused
        # (429), or find the episode ended by the refusals (409).
        assert statuses.count(200) <= flooded.unwrapped.horizon
        assert statuses.count(429) >= 1
        assert set(statuses) <= {200, 409, 429}
        assert flooded.history[-1].info["program_error"]["type"] == "TooManyCalls"
        assert flooded.history[-1].info["drop"] is True
    finally:
        flooded.close()
        normal.close()


# ---------------------------------------------------------------------- bounds
def _post_from(messages_or_body, **env_kwargs):
    """An episode whose program posts one raw request; returns (status, final info)."""
    seen = {}

    def program(task, client):
        url = f"{client.base_url}chat/completions"
        body = messages_or_body
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        reply = httpx.post(
            url, content=content, headers={"content-type": "application/json"}, timeout=60
        )
        seen["status"] = reply.status_code
        seen["message"] = reply.json()["error"]["message"] if reply.status_code >= 400 else ""
        return 1.0

    env = ProgramEnv(program, AGENTS, ["t"], transport="http", **env_kwargs)
    try:
        env.reset(seed=0)  # the program's one request is refused: it ends before any call
        info = dict(env.infos[env.agent_selection])
    finally:
        env.close()
    return seen, info


def test_an_oversized_body_is_refused_with_413_and_fails_the_episode():
    body = {"model": "planner", "messages": [{"role": "user", "content": "x" * 5000}]}
    seen, info = _post_from(body, max_request_bytes=4096)
    assert seen["status"] == 413 and "max_request_bytes=4096" in seen["message"]
    assert info["program_error"]["type"] == "RequestTooLarge"


def test_too_many_messages_are_refused_with_400_and_fail_the_episode():
    body = {"model": "planner", "messages": [{"role": "user", "content": "x"}] * 11}
    seen, info = _post_from(body, max_messages=10)
    assert seen["status"] == 400 and "max_messages=10" in seen["message"]
    assert info["program_error"]["type"] == "TooManyMessages"


def test_in_process_bounds_fail_the_episode_too():
    def program(task, client):
        # A program that swallows the refusal still fails its episode.
        with contextlib.suppress(ValueError):
            client.chat.completions.create(
                model="planner", messages=[{"role": "user", "content": "y" * 100}]
            )
        return 1.0

    env = ProgramEnv(program, AGENTS, ["t"], max_request_bytes=50)
    env.reset(seed=0)
    info = env.infos[env.agent_selection]
    assert info["program_error"]["type"] == "RequestTooLarge"
    assert "max_request_bytes=50" in info["program_error"]["message"]


def test_a_prompt_over_max_prompt_tokens_fails_the_episode():
    env = ProgramEnv(two_calls, AGENTS, ["t"], max_prompt_tokens=6)
    env.reset(seed=0)
    env.unwrapped.note_generation(7, 1, True)  # the rendered prompt had 7 tokens
    env.step("ok")
    info = env.history[-1].info
    assert info["program_error"]["type"] == "PromptTooLong"
    assert "max_prompt_tokens=6" in info["program_error"]["message"]
    assert not env.agents or all(env.terminations.values())


def test_model_time_counts_toward_max_episode_seconds():
    env = ProgramEnv(two_calls, AGENTS, ["t"], max_episode_seconds=0.2, episode_timeout=60)

    def slow_model(agent, messages):
        time.sleep(0.3)  # the policy's generation, which episode_timeout does not count
        return "ok"

    play(env, slow_model)
    error = env.history[-1].info["program_error"]
    assert error["type"] == "Timeout" and "max_episode_seconds=0.2" in error["message"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_request_bytes": 0}, "max_request_bytes"),
        ({"max_messages": -1}, "max_messages"),
        ({"max_concurrent_calls": 1.5}, "max_concurrent_calls"),
        ({"max_reward_parts": 0}, "max_reward_parts"),
        ({"max_prompt_tokens": 0}, "max_prompt_tokens"),
        ({"max_episode_seconds": float("inf")}, "max_episode_seconds"),
        ({"on_error": "pay"}, "on_error"),
        ({"isolation": "container"}, "isolation"),
    ],
)
def test_bad_bounds_are_refused_naming_the_argument(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ProgramEnv(two_calls, AGENTS, ["t"], **kwargs)
