"""``marft serve``: the unchanged agent program, pointed at the served run or its export with
``openai.OpenAI(base_url=..., api_key=...)``, reproduces ``marft eval``'s held-out episodes word
for word (greedy); the command binds 127.0.0.1, asks for its key, and stops on SIGTERM and Ctrl-C."""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import openai
import pytest
from serve_process import start_serve

from marft_algos.cli.evaluate import EvalArguments, evaluate_checkpoint, find_checkpoint
from marft_algos.cli.main import main
from marft_algos.serving import BackgroundServer, team_from_checkpoint, team_from_export

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
ENV = "program_team:program-math-dual-v0"
EPISODES = 6
KEY = "serve-test-key"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A one-iteration run of examples/program_team.py's dual team on the built-in model, its
    export, and marft eval's greedy transcripts of its held-out episodes."""
    sys.path.insert(0, str(EXAMPLES))
    try:
        root = tmp_path_factory.mktemp("serve")
        run = root / "run"
        main(
            [
                "train",
                "--env",
                ENV,
                "--model",
                "marft-tiny-math",
                "--output-dir",
                str(run),
                "--iterations",
                "1",
                "--episodes-per-iteration",
                "4",
                "--rollout-threads",
                "4",
                "--eval-episodes",
                str(EPISODES),
                "--no-plot",
                "--progress",
                "off",
            ]
        )
        main(["export", str(run)])
        checkpoint = find_checkpoint(run)
        metrics = evaluate_checkpoint(checkpoint, EvalArguments(before=False, samples=EPISODES))
        yield run, checkpoint, metrics
    finally:
        sys.path.remove(str(EXAMPLES))


def _served_episodes(url: str) -> tuple[list[float], list[list[str]]]:
    """Run the example's program, unchanged, on the held-out tasks against ``url``, concurrently;
    each episode's score and the replies its program received."""
    from marft_envs.math import load_dataset

    program_team = importlib.import_module("program_team")
    tasks = list(load_dataset("builtin:test"))[:EPISODES]

    def episode(task):
        client = openai.OpenAI(base_url=url, api_key=KEY, max_retries=0)
        replies: list[str] = []
        create = client.chat.completions.create

        def recording(**kwargs):
            reply = create(**kwargs)
            replies.append(reply.choices[0].message.content)
            return reply

        client.chat.completions.create = recording  # watch what the program receives
        return program_team.dual_math(task, client)["success"], replies

    with ThreadPoolExecutor(EPISODES) as pool:
        results = list(pool.map(episode, tasks))
    return [score for score, _ in results], [replies for _, replies in results]


def _eval_episodes(metrics):
    samples = metrics["samples"]
    return [float(s["correct"]) for s in samples], [
        [t["action"] for t in s["turns"]] for s in samples
    ]


@pytest.mark.parametrize("source", ["run", "export"])
def test_the_unchanged_program_reproduces_eval_through_the_served_team(trained, source):
    run, checkpoint, metrics = trained
    team = team_from_checkpoint(checkpoint) if source == "run" else team_from_export(run / "export")
    assert team.env_id == ENV and team.tool_prompt is None
    assert team.settings.do_sample is False and team.settings.tokens_for("actor") == 8
    with BackgroundServer(team, api_key=KEY) as server:
        scores, replies = _served_episodes(server.url)
        batches = server.batcher.batches
    expected_scores, expected_replies = _eval_episodes(metrics)
    assert replies == expected_replies  # every message, word for word
    assert scores == expected_scores
    assert sum(scores) / EPISODES == pytest.approx(metrics["eval/accuracy"])
    assert batches < 2 * EPISODES  # concurrent episodes shared generate calls


# SIGINT takes the same handler as SIGTERM: -m slow (the suite's time).
@pytest.mark.parametrize(
    "stop", [signal.SIGTERM, pytest.param(signal.SIGINT, marks=pytest.mark.slow)]
)
def test_the_command_asks_for_its_key_and_stops_cleanly(trained, stop):
    run, _, _ = trained
    process, url = start_serve([str(run), "--port", "0"], env={"MARFT_API_KEY": KEY})
    try:
        assert httpx.get(f"{url}/models").status_code == 401
        listed = httpx.get(f"{url}/models", headers={"authorization": f"Bearer {KEY}"})
        assert [m["id"] for m in listed.json()["data"]] == ["reasoner", "actor"]
        process.send_signal(stop)
        assert process.wait(30) == 0, process.stderr.read()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/models")


def test_a_folder_that_is_neither_a_run_nor_an_export_is_one_line(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "marft_algos.cli", "serve", str(tmp_path)],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "marft serve: error:" in done.stderr and "Traceback" not in done.stderr
    assert json.dumps(str(tmp_path))[1:-1] in done.stderr


def test_the_serve_flags_spell_the_one_request_limits_type():
    from marft_algos.cli.serve import ServeArguments
    from marft_envs.wire import RequestLimits

    assert ServeArguments().limits() == RequestLimits(max_concurrent_calls=16)
    limits = ServeArguments(max_body_bytes=4096, max_messages=8).limits()
    assert limits == RequestLimits(max_request_bytes=4096, max_messages=8)


def test_the_command_serves_the_agents_sdk_default_client_and_streams(trained):
    """The Responses API (the Agents SDK's default), streams and JSON errors, from ``marft
    serve`` itself: each answer is the chat completion's reply."""
    pytest.importorskip("agents", reason="the Agents SDK test needs openai-agents")
    import asyncio

    from agents import Agent, RunConfig, Runner, set_tracing_disabled
    from agents.models.openai_provider import OpenAIProvider

    run, _, _ = trained
    process, url = start_serve([str(run), "--port", "0"], env={"MARFT_API_KEY": KEY})
    try:
        client = openai.OpenAI(base_url=url, api_key=KEY, max_retries=0)
        ask = [{"role": "system", "content": "Solve."}, {"role": "user", "content": "2 + 2?"}]
        whole = client.chat.completions.create(model="reasoner", messages=ask)
        text = whole.choices[0].message.content
        chunks = client.chat.completions.create(model="reasoner", messages=ask, stream=True)
        assert "".join(c.choices[0].delta.content or "" for c in chunks) == text
        with client.responses.stream(model="reasoner", instructions="Solve.", input="2 + 2?") as s:
            assert s.get_final_response().output_text == text
        set_tracing_disabled(True)
        api = openai.AsyncOpenAI(base_url=url, api_key=KEY, max_retries=0)
        config = RunConfig(model_provider=OpenAIProvider(openai_client=api))
        agent = Agent(name="reasoner", instructions="Solve.", model="reasoner")
        assert asyncio.run(Runner.run(agent, "2 + 2?", run_config=config)).final_output == text
        with pytest.raises(openai.NotFoundError, match="not supported"):
            client.completions.create(model="reasoner", prompt="2 + 2 =")
        assert client.models.retrieve("actor").id == "actor"
        missing = httpx.get(f"{url}/nowhere", headers={"authorization": f"Bearer {KEY}"})
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "unknown_url"
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0, process.stderr.read()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
