"""Episodes as OpenTelemetry spans: the trace's structure and attributes (the SDK's in-memory
exporter), message text only when asked, the OTLP/JSON-lines file read back, and nothing of
OpenTelemetry imported while tracing is off."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otel extra: pip install 'marft[otel]'")

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from marft_algos.rollout.episodes import Decision, Episode
from marft_algos.runs.folder import RESUMABLE_CHANGES
from marft_algos.runs.tracing import TRACE_FIELDS, EpisodeTracer, TraceSettings, episode_tracer

T0 = 1_700_000_000_000_000_000  # epoch ns


def _decision(agent: str, turn: int, *, finished: bool = True, **kwargs) -> Decision:
    return Decision(
        episode=0,
        timestep=0,
        turn=turn,
        agent=agent,
        prompt_ids=[1, 2, 3, 4, 5][: 3 + turn],
        action_ids=[7, 8][: 1 + turn],
        log_probs=[-0.1] * (1 + turn),
        text=f"{agent} says hi",
        finished=finished,
        reward=0.5 * turn,
        messages=[
            {"role": "system", "content": f"You are {agent}."},
            {"role": "user", "content": "What is 2+2?"},
        ],
        started_ns=T0 + 1000 * (1 + 2 * turn),
        ended_ns=T0 + 1000 * (2 + 2 * turn),
        **kwargs,
    )


def _episode(**info) -> Episode:
    return Episode(
        seed=11,
        options={},
        decisions=[_decision("reasoner", 0), _decision("critic", 1, finished=False)],
        agent_returns={"reasoner": 0.0, "critic": 0.5},
        team_return=1.0,
        info={"correct": True, "reward_parts": {"answer": 1.0, "format": 0.25}, **info},
        started_ns=T0,
        ended_ns=T0 + 10_000,
    )


def _traced(episodes, settings=None, **record):
    memory = InMemorySpanExporter()
    tracer = EpisodeTracer(settings or TraceSettings(), exporters=[memory])
    tracer.record(episodes, **{"iteration": 3, "split": "train", **record})
    tracer.close()
    return memory.get_finished_spans()


def test_one_trace_per_episode_with_a_chat_span_per_decision():
    spans = _traced([_episode(), _episode()], env="math-dual-v7")
    roots = [s for s in spans if s.parent is None]
    assert [s.name for s in roots] == ["episode math-dual-v7"] * 2
    assert len({s.context.trace_id for s in roots}) == 2, "one trace per episode"
    for root in roots:
        children = [s for s in spans if s.parent and s.parent.span_id == root.context.span_id]
        assert [c.name for c in children] == ["chat reasoner", "chat critic"]
        assert all(c.context.trace_id == root.context.trace_id for c in children)
        assert all(c.kind is SpanKind.CLIENT for c in children)
        # The recorded times: the episode's reset to its last round, each call's own.
        assert (root.start_time, root.end_time) == (T0, T0 + 10_000)
        assert [(c.start_time, c.end_time) for c in children] == [
            (T0 + 1000, T0 + 2000),
            (T0 + 3000, T0 + 4000),
        ]
    root = roots[1]
    assert root.attributes["marft.episode"] == 1 and root.attributes["marft.iteration"] == 3
    assert root.attributes["marft.split"] == "train"
    assert root.attributes["marft.policy_version"] == 3
    assert root.attributes["marft.reward"] == 1.0
    assert root.attributes["marft.reward.answer"] == 1.0
    assert root.attributes["marft.reward.format"] == 0.25
    assert root.attributes["marft.reward.agent.critic"] == 0.5
    assert root.attributes["marft.correct"] is True and root.attributes["marft.failed"] is False
    assert root.attributes["marft.env.id"] == "math-dual-v7"
    assert "marft.error.type" not in root.attributes and "marft.branch.id" not in root.attributes
    critic = next(s for s in spans if s.name == "chat critic")
    assert dict(critic.attributes) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "marft",
        "gen_ai.request.model": "critic",
        "gen_ai.response.model": "critic",
        "gen_ai.agent.name": "critic",
        "gen_ai.usage.input_tokens": 4,
        "gen_ai.usage.output_tokens": 2,
        "gen_ai.response.finish_reasons": ("length",),
        "marft.iteration": 3,
        "marft.episode": 0,
        "marft.split": "train",
        "marft.policy_version": 3,
        "marft.timestep": 0,
        "marft.turn": 1,
        "marft.reward": 0.5,
    }


def test_message_text_only_when_asked(monkeypatch):
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    for span in _traced([_episode()]):
        assert not any(k.startswith("gen_ai.input") or "messages" in k for k in span.attributes)
        assert not any("says hi" in str(v) for v in span.attributes.values())
    on = _traced([_episode()], TraceSettings(capture_content=True))
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    by_variable = _traced([_episode()])
    for spans in (on, by_variable):
        chat = next(s for s in spans if s.name == "chat reasoner")
        assert json.loads(chat.attributes["gen_ai.input.messages"]) == [
            {"role": "system", "parts": [{"type": "text", "content": "You are reasoner."}]},
            {"role": "user", "parts": [{"type": "text", "content": "What is 2+2?"}]},
        ]
        assert json.loads(chat.attributes["gen_ai.output.messages"]) == [
            {
                "role": "assistant",
                "parts": [{"type": "text", "content": "reasoner says hi"}],
                "finish_reason": "stop",
            }
        ]


def test_failed_episode_branches_and_stale_decisions():
    failed = _episode(program_error={"type": "Timeout", "message": "took 30 s"}, drop=True)
    failed.branch = (0, 1, 2)
    failed.decisions[0].branch, failed.decisions[0].policy_version = (0, 1), 1
    spans = _traced([failed], iteration=5, split="eval", policy_version=4)
    root = next(s for s in spans if s.parent is None)
    assert root.status.status_code is StatusCode.ERROR
    assert root.status.description == "Timeout: took 30 s"
    assert root.attributes["marft.failed"] is True and root.attributes["marft.dropped"] is True
    assert root.attributes["marft.error.type"] == "Timeout"
    assert root.attributes["marft.correct"] is False
    assert root.attributes["marft.branch.id"] == "0.1.2"
    assert root.attributes["marft.policy_version"] == 4
    first, second = (s for s in spans if s.parent is not None)
    assert first.attributes["marft.branch.id"] == "0.1"
    assert first.attributes["marft.policy_version"] == 1, "the version that sampled it"
    assert second.attributes["marft.policy_version"] == 4
    assert root.attributes["marft.split"] == "eval" and root.attributes["marft.iteration"] == 5


def test_untimed_decisions_fall_inside_their_episode():
    episode = _episode()
    for d in episode.decisions:
        d.started_ns = d.ended_ns = None
    spans = _traced([episode])
    root = next(s for s in spans if s.parent is None)
    for span in spans:
        assert root.start_time <= span.start_time <= span.end_time <= root.end_time


def test_file_exporter_writes_otlp_json_lines(tmp_path):
    path = tmp_path / "traces" / "spans.jsonl"
    memory = InMemorySpanExporter()
    tracer = EpisodeTracer(TraceSettings(file=str(path)), exporters=[memory])
    tracer.record([_episode(), _episode()], iteration=0, split="eval")
    tracer.close()
    expected = {format(s.context.span_id, "016x"): s for s in memory.get_finished_spans()}
    spans = []
    for line in path.read_text(encoding="utf-8").splitlines():
        request = json.loads(line)
        for resource in request["resourceSpans"]:
            service = [a for a in resource["resource"]["attributes"] if a["key"] == "service.name"]
            assert service == [{"key": "service.name", "value": {"stringValue": "marft"}}]
            for scope in resource["scopeSpans"]:
                assert scope["scope"]["name"] == "marft"
                spans.extend(scope["spans"])
    assert len(spans) == len(expected) == 6
    for span in spans:
        original = expected[span["spanId"]]
        assert span["traceId"] == format(original.context.trace_id, "032x")
        assert len(span["traceId"]) == 32 and span["traceId"] == span["traceId"].lower()
        if original.parent is None:
            assert "parentSpanId" not in span
        else:
            assert span["parentSpanId"] == format(original.parent.span_id, "016x")
        assert span["name"] == original.name
        assert span["startTimeUnixNano"] == str(original.start_time)
        assert span["kind"] == (3 if original.name.startswith("chat") else 1)  # CLIENT, INTERNAL
        values = {a["key"]: a["value"] for a in span["attributes"]}
        assert values["marft.split"] == {"stringValue": "eval"}
        if original.name == "chat critic":
            assert values["gen_ai.usage.input_tokens"] == {"intValue": "4"}
            assert values["gen_ai.response.finish_reasons"] == {
                "arrayValue": {"values": [{"stringValue": "length"}]}
            }
            assert values["marft.reward"] == {"doubleValue": 0.5}
        if original.parent is None:
            assert values["marft.correct"] == {"boolValue": True}


def test_settings_are_checked():
    assert TRACE_FIELDS <= RESUMABLE_CHANGES, "a resume may change where spans go"
    assert not episode_tracer(TraceSettings()).enabled
    assert not episode_tracer(None).enabled
    with pytest.raises(ValueError, match="http:// or https://"):
        TraceSettings(otlp="127.0.0.1:4318")
    with pytest.raises(ValueError, match="--trace-file"):
        TraceSettings(file="")


def test_missing_extra_names_the_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk", None)
    with pytest.raises(ImportError, match=r"pip install 'marft\[otel\]'"):
        EpisodeTracer(TraceSettings(file="x.jsonl"))


def test_nothing_of_opentelemetry_is_imported_while_off():
    code = (
        "import sys\n"
        "from marft_algos.cli.main import main\n"
        "import marft_algos.trainers, marft_algos.serving\n"
        "from marft_algos.runs.tracing import TraceSettings, episode_tracer\n"
        "from marft_algos.trainers.config import TrainerConfig\n"
        "tracer = episode_tracer(TraceSettings.of_config(TrainerConfig()))\n"
        "tracer.record([], 0, 'train'); tracer.close()\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_trace_file_reads_back_as_recorded_calls(tmp_path):
    """The trace loader (marft_envs.programs.traces) reads the file: each episode's calls in
    order, with their agent, messages, reply and finish reason."""
    from marft_envs.programs.traces import load_trace_tasks, read_trace_calls

    path = tmp_path / "spans.jsonl"
    tracer = EpisodeTracer(TraceSettings(file=str(path), capture_content=True))
    tracer.record([_episode(), _episode()], 0, "eval", env="math-dual-v6")
    tracer.close()
    traces = read_trace_calls([path])
    assert len(traces) == 2
    for trace in traces:
        calls = [(c.agent, c.messages, c.output, c.finish_reason) for c in trace.calls]
        assert calls == [
            (
                agent,
                [
                    {"role": "system", "content": f"You are {agent}."},
                    {"role": "user", "content": "What is 2+2?"},
                ],
                {"role": "assistant", "content": f"{agent} says hi"},
                reason,
            )
            for agent, reason in (("reasoner", "stop"), ("critic", "length"))
        ]
    tasks = load_trace_tasks([path])
    assert list(tasks) == ["What is 2+2?"] and tasks.summary.duplicates == 1


def test_a_large_batch_of_episodes_loses_no_span(tmp_path, monkeypatch):
    """The batch processor drops spans that arrive while its queue is full: recording waits for
    the exporters every FLUSH_EVERY spans (here a queue of 16 and 60 spans)."""
    import marft_algos.runs.tracing as tracing

    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "16")
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "16")
    monkeypatch.setattr(tracing, "FLUSH_EVERY", 8)
    path = tmp_path / "spans.jsonl"
    tracer = EpisodeTracer(TraceSettings(file=str(path)))
    tracer.record([_episode() for _ in range(20)], 0, "eval")
    tracer.close()
    spans = [
        span
        for line in path.read_text().splitlines()
        for resource in json.loads(line)["resourceSpans"]
        for scope in resource["scopeSpans"]
        for span in scope["spans"]
    ]
    assert len(spans) == 60
