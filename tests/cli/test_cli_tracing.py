"""``marft train --trace-otlp URL --trace-file PATH`` and ``marft eval --trace-otlp``: the episodes'
spans arrive in a real local OTLP/HTTP receiver (decoded with opentelemetry-proto) and in the
OTLP/JSON-lines file with the attributes docs/tracing.md lists."""

from __future__ import annotations

import json

import pytest
from budgets import TINY

pytest.importorskip("opentelemetry.proto", reason="the otel extra: pip install 'marft[otel]'")

from otlp_receiver import OTLPReceiver

from marft_algos.cli.main import main

BUDGET = [*TINY, "--no-plot", "--progress", "off"]


def _file_spans(path):
    spans = []
    for line in path.read_text(encoding="utf-8").splitlines():
        for resource in json.loads(line)["resourceSpans"]:
            for scope in resource["scopeSpans"]:
                spans.extend(scope["spans"])
    return spans


def _check_episode(root, spans, env_id):
    """The documented shape of one episode's trace."""
    attributes = root["attributes"]
    assert root["name"] == f"episode {env_id}" and root["kind"] == 1  # INTERNAL
    assert attributes["marft.env.id"] == env_id
    assert isinstance(attributes["marft.reward"], float)
    assert isinstance(attributes["marft.correct"], bool)
    assert attributes["marft.failed"] is False and "marft.error.type" not in attributes
    chats = [s for s in spans if s["parent_span_id"] == root["span_id"]]
    assert len(chats) == attributes["marft.decisions"] >= 1
    for chat in chats:
        a = chat["attributes"]
        agent = chat["name"].removeprefix("chat ")
        assert chat["trace_id"] == root["trace_id"] and chat["kind"] == 3  # CLIENT
        assert root["start"] <= chat["start"] <= chat["end"] <= root["end"]
        assert a["gen_ai.operation.name"] == "chat"
        assert a["gen_ai.request.model"] == a["gen_ai.agent.name"] == agent
        assert a["gen_ai.usage.input_tokens"] > 0
        assert 1 <= a["gen_ai.usage.output_tokens"] <= 6  # --max-new-tokens 6
        assert a["gen_ai.response.finish_reasons"][0] in ("stop", "length")
        assert a["marft.split"] == attributes["marft.split"]
        assert a["marft.iteration"] == attributes["marft.iteration"]
        assert not any("messages" in k for k in a), "message text is opt-in"
    return chats


def test_train_and_eval_send_every_episode_as_a_trace(tiny_path, tmp_path, monkeypatch):
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    run, trace_file = tmp_path / "run", tmp_path / "traces" / "train.jsonl"
    with OTLPReceiver() as receiver:
        main(
            [
                "train",
                "--output-dir",
                str(run),
                "--model",
                tiny_path,
                "--iterations",
                "1",
                *BUDGET,
                "--trace-otlp",
                receiver.url,
                "--trace-file",
                str(trace_file),
            ]
        )
        trained = list(receiver.spans)
        # marft eval with no URL: the SDK's exporter reads the standard variable.
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
        metrics = main(["eval", str(run), "--trace-otlp", "--json", str(tmp_path / "m.json")])
        evaluated = receiver.spans[len(trained) :]
    assert set(receiver.paths) == {"/v1/traces"}

    env_id = json.loads((run / "config.json").read_text())["run"]["env"]["id"]
    roots = [s for s in trained if not s["parent_span_id"]]
    # 4 rollout episodes; the held-out evaluation before training and after the iteration: 4 each.
    assert sorted(r["attributes"]["marft.split"] for r in roots) == ["eval"] * 8 + ["train"] * 4
    assert len({r["trace_id"] for r in roots}) == len(roots), "one trace per episode"
    assert {r["resource"]["service.name"] for r in roots} == {"marft"}
    train_roots = [r for r in roots if r["attributes"]["marft.split"] == "train"]
    assert sorted(r["attributes"]["marft.episode"] for r in train_roots) == [0, 1, 2, 3]
    assert {r["attributes"]["marft.policy_version"] for r in train_roots} == {0}
    for root in roots:
        _check_episode(root, trained, env_id)
    file_ids = sorted(s["spanId"] for s in _file_spans(trace_file))
    assert file_ids == sorted(s["span_id"] for s in trained), "the file holds the same spans"

    eval_roots = [s for s in evaluated if not s["parent_span_id"]]
    assert (
        sorted(r["attributes"]["marft.split"] for r in eval_roots) == ["before"] * 4 + ["eval"] * 4
    )
    for root in eval_roots:
        chats = _check_episode(root, evaluated, env_id)
        split = root["attributes"]["marft.split"]
        assert root["attributes"]["marft.iteration"] == 1
        assert root["attributes"]["marft.policy_version"] == (1 if split == "eval" else 0)
        assert {c["attributes"]["marft.policy_version"] for c in chats} == {
            root["attributes"]["marft.policy_version"]
        }
    tuned = [r for r in eval_roots if r["attributes"]["marft.split"] == "eval"]
    correct = sum(r["attributes"]["marft.correct"] for r in tuned) / len(tuned)
    assert correct == metrics["eval/accuracy"], "the spans tell the accuracy marft eval printed"


TASKS = [f"task {i}" for i in range(8)]
HELD_OUT = [f"held {i}" for i in range(4)]


def two_agents(task, client):
    """An agent program: the planner, then the solver; held-out task 1 raises."""
    for agent in ("planner", "solver"):
        client.chat.completions.create(model=agent, messages=[{"role": "user", "content": task}])
    if task == "held 1":
        raise ValueError("no ticket 1")
    return {"answer": 1.0, "format": 0.5}


@pytest.fixture
def traced_team():
    import marft_envs

    marft_envs.register_program(
        "traced-team-v0", two_agents, agents=["planner", "solver"], tasks=TASKS, test_tasks=HELD_OUT
    )
    yield "traced-team-v0"
    marft_envs.registry.pop("traced-team-v0", None)


def test_agent_program_calls_reward_parts_and_failures_in_the_trace_file(
    tiny_path, tmp_path, traced_team
):
    trace_file = tmp_path / "spans.jsonl"
    command = ["train", "--env", traced_team, "--algo", "grpo", "--model", tiny_path]
    run = ["--iterations", "1", "--output-dir", str(tmp_path / "run"), *BUDGET]
    main([*command, *run, "--trace-file", str(trace_file), "--trace-content"])
    spans = _file_spans(trace_file)
    values = {
        s["spanId"]: {a["key"]: next(iter(a["value"].values())) for a in s["attributes"]}
        for s in spans
    }
    roots = [s for s in spans if "parentSpanId" not in s]
    assert len(roots) == 12  # 4 rollout episodes, 4 held-out before and after training
    for root in roots:
        a = values[root["spanId"]]
        chats = [s for s in spans if s.get("parentSpanId") == root["spanId"]]
        assert [c["name"] for c in chats] == ["chat planner", "chat solver"]
        for chat in chats:
            sent = json.loads(values[chat["spanId"]]["gen_ai.input.messages"])
            assert sent[-1]["parts"][0]["content"].startswith(("task", "held"))
            assert "gen_ai.output.messages" in values[chat["spanId"]]
        if a["marft.split"] == "eval" and a["marft.episode"] == "1":  # intValue: a string
            assert a["marft.failed"] is True and a["marft.error.type"] == "ValueError"
            assert root["status"]["code"] == 2  # ERROR
            assert "no ticket 1" in root["status"]["message"]
        else:
            assert a["marft.failed"] is False and "marft.error.type" not in a
            assert a["marft.reward.answer"] == 1.0 and a["marft.reward.format"] == 0.5
            assert a["marft.reward"] == 1.5


def test_bad_trace_settings_are_one_line_naming_the_fix(tmp_path):
    from marft_algos.cli.parsing import UsageError
    from marft_algos.cli.serve import ServeArguments

    with pytest.raises(UsageError, match=r"--trace-otlp http://127\.0\.0\.1:4318"):
        ServeArguments(trace_otlp="127.0.0.1:4318")
    with pytest.raises(UsageError, match="--trace-file"):
        ServeArguments(trace_file=str(tmp_path))  # a folder
    assert ServeArguments(trace_otlp="").trace_settings().enabled
