"""End to end: a training run's episodes (rollouts and held-out evaluation) arrive in a real local
OTLP/HTTP receiver as documented in docs/tracing.md, through the SDK's OTLP exporter and the
standard variables; the same run's trace file holds the same spans."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("opentelemetry.proto", reason="the otel extra: pip install 'marft[otel]'")

from otlp_receiver import OTLPReceiver
from test_trainers import build


def _file_spans(path):
    spans = []
    for line in path.read_text(encoding="utf-8").splitlines():
        for resource in json.loads(line)["resourceSpans"]:
            for scope in resource["scopeSpans"]:
                spans.extend(scope["spans"])
    return spans


def test_training_run_sends_every_episode_to_an_otlp_receiver(tiny_path, tmp_path, monkeypatch):
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    trace_file = tmp_path / "spans.jsonl"
    with OTLPReceiver() as receiver:
        # No URL in the config: the SDK's exporter reads the standard variable.
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
        trainer = build(
            "grpo",
            tiny_path,
            iterations=1,
            eval_every=1,
            trace_otlp="",
            trace_file=str(trace_file),
        )
        try:
            trainer.train()
        finally:
            trainer.close()  # exports what is left
        spans = list(receiver.spans)
    assert receiver.paths and set(receiver.paths) == {"/v1/traces"}
    roots = [s for s in spans if not s["parent_span_id"]]
    splits = sorted(r["attributes"]["marft.split"] for r in roots)
    # 4 rollout episodes; held-out evaluation before training and after the iteration: 4 each.
    assert splits == ["eval"] * 8 + ["train"] * 4
    assert len({r["trace_id"] for r in roots}) == 12, "one trace per episode"
    assert {r["resource"]["service.name"] for r in roots} == {"marft"}
    assert {r["attributes"]["marft.iteration"] for r in roots} == {0, 1}
    train_roots = [r for r in roots if r["attributes"]["marft.split"] == "train"]
    assert sorted(r["attributes"]["marft.episode"] for r in train_roots) == [0, 1, 2, 3]
    for root in roots:
        attributes = root["attributes"]
        assert root["name"] == "episode" and root["kind"] == 1  # INTERNAL
        assert isinstance(attributes["marft.reward"], float)
        assert attributes["marft.failed"] is False
        assert attributes["marft.policy_version"] == attributes["marft.iteration"]
        chats = [s for s in spans if s["parent_span_id"] == root["span_id"]]
        assert [c["name"] for c in chats] == ["chat writer", "chat answerer"]
        for chat in chats:
            agent = chat["name"].split()[1]
            a = chat["attributes"]
            assert chat["trace_id"] == root["trace_id"] and chat["kind"] == 3  # CLIENT
            assert root["start"] <= chat["start"] <= chat["end"] <= root["end"]
            assert a["gen_ai.operation.name"] == "chat"
            assert a["gen_ai.request.model"] == a["gen_ai.agent.name"] == agent
            assert a["gen_ai.usage.input_tokens"] > 0
            assert 1 <= a["gen_ai.usage.output_tokens"] <= 6
            assert a["gen_ai.response.finish_reasons"][0] in ("stop", "length")
            assert a["marft.split"] == attributes["marft.split"]
            assert not any("messages" in k for k in a), "message text is opt-in"
    file_spans = _file_spans(trace_file)
    assert sorted(s["spanId"] for s in file_spans) == sorted(s["span_id"] for s in spans)
