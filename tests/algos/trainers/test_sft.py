"""The supervised warm start on the tiny model: the loss covers each agent's reply tokens only
(checked by hand), an agent's data reaches its adapter alone, the filter keeps what it should,
and bad settings and transcripts are refused with the file, line and field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from marft_algos.policy import MultiAgentPolicy
from marft_algos.protocols import GenerationSettings
from marft_algos.trainers.sft import SFTConfig, SFTTrainer
from marft_algos.trainers.sft_data import (
    Transcript,
    TranscriptError,
    Turn,
    keep_transcripts,
    read_transcripts,
)
from marft_algos.trainers.sft_examples import IGNORE_INDEX, build_examples, reply_log_likelihood

SYSTEM = {"role": "system", "content": "Add."}
DATA = Path(__file__).resolve().parents[2] / "data" / "traces"


def turn(agent: str, question: str, reply: str, finished: bool = True) -> Turn:
    return Turn(agent, [SYSTEM, {"role": "user", "content": question}], reply, finished=finished)


def episode(turns: list[Turn], reward: float | None = 1.0) -> Transcript:
    return Transcript(turns, reward, None, "test:1")


@pytest.fixture(scope="module")
def policy(tiny_path):
    return MultiAgentPolicy.from_pretrained(tiny_path, ["solver", "checker"], seed=0)


def adapter_state(policy, agent):
    return [p.detach().clone() for p in policy.trainable_parameters(agent)]


def test_labels_mask_every_prompt_token_and_the_loss_is_the_replies_alone(policy):
    tokenizer = policy.tokenizer("solver")
    eos = policy.backbone("solver").eos_ids[0]
    (example,), counts = build_examples(
        policy, [episode([turn("solver", "2+5", "7")])], GenerationSettings(max_new_tokens=8)
    )
    # By hand: ChatML up to the opened assistant turn is the prompt; "7" and <|im_end|> the reply.
    text = "<|im_start|>system\nAdd.<|im_end|>\n<|im_start|>user\n2+5<|im_end|>\n<|im_start|>assistant\n"
    prompt = tokenizer(text, add_special_tokens=False)["input_ids"]
    seven = tokenizer("7", add_special_tokens=False)["input_ids"]
    assert len(seven) == 1 and tokenizer.convert_ids_to_tokens(eos) == "<|im_end|>"
    assert example.prompt_ids == prompt and example.completion_ids == [*seven, eos]
    assert example.labels == [IGNORE_INDEX] * len(prompt) + [*seven, eos]
    assert counts["examples"] == 1 and counts["cut_at_budget"] == 0

    # An independent loss: the adapter's logits over the whole sequence, cross-entropy against the
    # labels with -100 ignored, equals the trainer's, and covers exactly the two reply tokens.
    with torch.no_grad():
        log_likelihood, count = reply_log_likelihood(policy, "solver", [example])
        with policy.acting("solver") as model:
            logits = model(torch.tensor([example.input_ids])).logits[0].float()
        labels = torch.tensor(example.labels)
        reference = torch.nn.functional.cross_entropy(
            logits[:-1], labels[1:], ignore_index=IGNORE_INDEX, reduction="sum"
        )
        by_hand = -sum(
            torch.log_softmax(logits[i - 1], -1)[example.input_ids[i]]
            for i in range(len(prompt), len(example.input_ids))
        )
    assert count == 2
    assert float(-log_likelihood) == pytest.approx(float(reference), rel=1e-5)
    assert float(reference) == pytest.approx(float(by_hand), rel=1e-5)
    # completion_only_loss=False: every token after the first is labelled, the prompt's too.
    with torch.no_grad():
        everything, count = reply_log_likelihood(policy, "solver", [example], completion_only=False)
        targets = torch.tensor(example.input_ids)
        whole = torch.nn.functional.cross_entropy(logits[:-1], targets[1:], reduction="sum")
    assert count == len(example.input_ids) - 1
    assert float(-everything) == pytest.approx(float(whole), rel=1e-5)


def test_a_reply_past_the_agents_budget_is_cut_without_its_end_token(policy):
    settings = GenerationSettings(max_new_tokens=8, max_new_tokens_per_agent={"solver": 2})
    examples, counts = build_examples(
        policy, [episode([turn("solver", "1+1", "222"), turn("checker", "1+1", "222")])], settings
    )
    digits = policy.tokenizer("solver")("222", add_special_tokens=False)["input_ids"]
    eos = policy.backbone("solver").eos_ids[0]
    assert [e.completion_ids for e in examples] == [digits[:2], [*digits, eos]]
    assert counts["cut_at_budget"] == 1
    long, counts = build_examples(
        policy, [episode([turn("solver", "1+1", "2")])], settings, max_length=5
    )
    assert long == [] and counts["too_long"] == 1


def test_each_agent_trains_its_own_adapter_only(tiny_path, tmp_path):
    policy = MultiAgentPolicy.from_pretrained(tiny_path, ["solver", "checker"], seed=0)
    before_a, before_b = adapter_state(policy, "solver"), adapter_state(policy, "checker")
    data = [episode([turn("solver", f"{i}+1", str(i + 1))]) for i in range(4)]
    config = SFTConfig(learning_rate=1e-2, num_train_epochs=2, per_device_train_batch_size=2)
    trainer = SFTTrainer(policy, data, config)
    loss_before = trainer.mean_loss()["solver"]
    records = trainer.train()
    assert any(
        not torch.equal(x, y)
        for x, y in zip(before_a, adapter_state(policy, "solver"), strict=True)
    )
    assert all(
        torch.equal(x, y) for x, y in zip(before_b, adapter_state(policy, "checker"), strict=True)
    )
    assert trainer.mean_loss()["solver"] < loss_before
    assert [r["iteration"] for r in records] == [1, 2] and "sft/loss/checker" not in records[0]
    assert records[0]["sft/examples/solver"] == 4 and records[0]["sft/steps/solver"] == 2


def test_min_reward_and_a_user_function_filter_the_episodes(tmp_path, monkeypatch):
    good, bad, unknown = episode([], 1.0), episode([], 0.0), episode([], None)
    assert keep_transcripts([good, bad], min_reward=0.5) == [good]
    assert keep_transcripts([good, bad, unknown]) == [good, bad, unknown]
    with pytest.raises(TranscriptError, match="no team reward is recorded"):
        keep_transcripts([unknown], min_reward=0.5)
    (tmp_path / "my_filters.py").write_text("def short(t):\n    return len(t.turns) < 2\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    long = episode([turn("solver", "1", "2"), turn("checker", "1", "2")], 1.0)
    from marft_algos.trainers.sft_data import load_filter

    assert keep_transcripts([good, long], keep=load_filter("my_filters:short")) == [good]
    with pytest.raises(ValueError, match="has no function 'nope'"):
        load_filter("my_filters:nope")


def test_chat_logs_and_otlp_traces_are_read_with_their_rewards(tmp_path):
    log = tmp_path / "calls.jsonl"
    rows = [
        {"episode": 1, "agent": "solver", "messages": [SYSTEM], "output": "x", "reward": 1},
        {
            "episode": 2,
            "agent": "solver",
            "messages": [SYSTEM, {"role": "assistant", "content": "y"}],
        },
        {
            "episode": 1,
            "agent": "checker",
            "messages": [SYSTEM],
            "output": {"role": "assistant", "content": "z"},
        },
    ]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    first, second = read_transcripts(log)
    assert [(t.agent, t.reply) for t in first.turns] == [("solver", "x"), ("checker", "z")]
    assert first.reward == 1.0 and second.reward is None and second.turns[0].messages == [SYSTEM]
    log.write_text(json.dumps(rows[0]) + "\n" + json.dumps({**rows[2], "reward": 0}) + "\n")
    with pytest.raises(TranscriptError, match=r"calls\.jsonl:2: field 'reward' is 0 but"):
        read_transcripts(log)
    # Spans of opentelemetry-instrumentation-openai-v2, agents renamed to the team's.
    traces = read_transcripts(DATA / "openai_v2_latest.jsonl", agents={"router": "checker"})
    assert len(traces) == 4 and {t.reward for t in traces} == {None}
    assert [t.agent for t in traces[0].turns] == ["checker", "solver"]
    assert traces[0].turns[0].reply == "billing" and traces[0].turns[0].finished


def test_bad_transcript_lines_name_the_file_the_line_and_the_field(tmp_path):
    samples = tmp_path / "samples.jsonl"
    good = {"team_return": 1.0, "turns": [{"agent": "solver", "messages": [SYSTEM], "action": "2"}]}
    cases = {
        '{"turns": [{"agent": "solver", "messages": []}]}': "field 'turns\\[0\\].action'",
        '{"turns": [{"agent": "solver", "messages": "hi", "action": "2"}]}': "field 'turns\\[0\\].messages' must be a list",
        '{"team_return": "high", "turns": []}': "field 'team_return' must be a number",
        '{"messages": []}': "field 'turns' is missing",
        "not json": "not JSON",
    }
    for line, message in cases.items():
        samples.write_text(json.dumps(good) + "\n" + line + "\n")
        with pytest.raises(TranscriptError, match=f"samples.jsonl:2: {message}"):
            read_transcripts(samples)
    (tmp_path / "config.json").write_text("{}")
    samples.unlink()
    with pytest.raises(TranscriptError, match=r"holds no samples\.jsonl"):
        read_transcripts(tmp_path)


def test_bad_settings_and_empty_data_are_refused(policy):
    for kwargs, message in [
        ({"packing": True}, "packing=True is not supported"),
        ({"learning_rate": 0.0}, "learning_rate=0.0"),
        ({"num_train_epochs": 0}, "num_train_epochs=0"),
        ({"max_length": 1}, "max_length=1"),
        ({"filter": "no_colon"}, "module:function"),
    ]:
        with pytest.raises(ValueError, match=message):
            SFTConfig(**kwargs)
    with pytest.raises(ValueError, match="No example to train on: 1 episodes read, 0 kept"):
        SFTTrainer(policy, [episode([turn("solver", "1", "2")], 0.0)], SFTConfig(min_reward=1.0))
    with pytest.raises(TranscriptError, match="agent 'critic' is not in the team"):
        SFTTrainer(policy, [episode([turn("critic", "1", "2")])], SFTConfig())


def test_episodes_recorded_in_an_evaluation_are_left_out_unless_allowed(policy):
    """A marft transcript row without a split (samples.jsonl, marft eval's JSON) and a trace whose
    marft.split is not 'train' are held-out problems: never trained on unless asked."""
    turns = [turn("solver", "2+5", "7")]
    row = {"turns": [], "team_return": 1.0}
    held_out = [
        Transcript(turns, 1.0, True, "samples.jsonl:1", dict(row)),
        Transcript(turns, 1.0, True, "samples.jsonl:2", {**row, "split": "eval"}),
        Transcript(turns, 1.0, True, "t.jsonl:1", {"attributes": {"marft.split": "eval_sampled"}}),
    ]
    training = [
        Transcript(turns, 1.0, True, "samples.jsonl:3", {**row, "split": "train"}),
        Transcript(turns, 1.0, True, "t.jsonl:2", {"attributes": {"marft.split": "train"}}),
        Transcript(turns, 1.0, True, "calls.jsonl:1", {"records": [{"messages": []}]}),  # no split
    ]
    assert [t.held_out for t in held_out + training] == [True] * 3 + [False] * 3
    assert keep_transcripts(held_out + training) == training
    assert keep_transcripts(held_out + training, allow_held_out=True) == held_out + training
    trainer = SFTTrainer(policy, held_out + training, SFTConfig())
    assert trainer.counts["episodes_held_out"] == 3 and trainer.counts["episodes_kept"] == 3
    with pytest.raises(ValueError, match="all 3 episodes read were recorded in an evaluation"):
        SFTTrainer(policy, held_out, SFTConfig())
    allowed = SFTTrainer(policy, held_out, SFTConfig(allow_held_out=True))
    assert allowed.counts["episodes_kept"] == 3 and allowed.counts["episodes_held_out"] == 0
