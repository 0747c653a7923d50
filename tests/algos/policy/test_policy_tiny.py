"""The tiny local model loads through the Auto classes, tokenises sensibly and generates."""

from __future__ import annotations

import json

import pytest
import torch
from trainer_envs import TOOL_TEMPLATE
from transformers import AutoModelForCausalLM, AutoTokenizer

from marft_algos.policy.rendering import (
    FALLBACK_CHAT_TEMPLATE,
    ToolTemplateError,
    render_prompt_ids,
    render_prompt_text,
    supports_tools,
)
from marft_algos.policy.tiny import build_tiny_tokenizer, tiny_model_path


def test_loads_through_auto_classes_and_generates(tiny_path):
    model = AutoModelForCausalLM.from_pretrained(tiny_path)
    tokenizer = AutoTokenizer.from_pretrained(tiny_path)
    assert model.config.model_type == "qwen2"
    assert model.config.attention_dropout == 0.0
    assert len(tokenizer) <= 512
    assert model.config.vocab_size == len(tokenizer)
    ids = torch.tensor([render_prompt_ids(tokenizer, [{"role": "user", "content": "1+1?"}])])
    out = model.generate(
        ids, max_new_tokens=5, do_sample=False, pad_token_id=tokenizer.pad_token_id
    )
    assert out.shape[1] > ids.shape[1]


def test_tokenizer_digits_special_tokens_and_roundtrip(tiny_path):
    tokenizer = AutoTokenizer.from_pretrained(tiny_path)
    pieces = [tokenizer.decode([i]) for i in tokenizer("x = 12345")["input_ids"]]
    assert pieces[-5:] == ["1", "2", "3", "4", "5"]
    for token in ("<|im_start|>", "<|im_end|>", "<|endoftext|>"):
        assert len(tokenizer(token)["input_ids"]) == 1
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token == "<|endoftext|>"
    text = "Answer: $\\boxed{\\frac{3}{4}}$ — naïve 你好"
    assert tokenizer.decode(tokenizer(text)["input_ids"]) == text
    # The tokenizer built in memory and the one loaded back split text identically.
    built = build_tiny_tokenizer()
    assert built(text)["input_ids"] == tokenizer(text)["input_ids"]


def test_tokenizer_whole_number_tokens_survive_save_and_load(tmp_path):
    built = build_tiny_tokenizer(vocab_size=700, number_digits=2)
    built.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    text = "7 \\times 8 = 56\n56 + 3 = 59 and 1234"
    pieces = [loaded.decode([i]) for i in loaded(text)["input_ids"]]
    assert "56" in pieces and "59" in pieces
    assert pieces[-2:] == ["12", "34"]  # cut left to right into two-digit pieces
    assert all(len(loaded(str(n))["input_ids"]) == 1 for n in range(100))
    assert loaded(text)["input_ids"] == built(text)["input_ids"]
    assert loaded.decode(loaded(text)["input_ids"]) == text


def test_tokenizer_rejects_bad_number_settings():
    with pytest.raises(ValueError, match="number_digits must be 1, 2 or 3"):
        build_tiny_tokenizer(number_digits=4)
    with pytest.raises(ValueError, match="raise vocab_size"):
        build_tiny_tokenizer(vocab_size=300, number_digits=2)


def test_chat_template_renders_chatml(tiny_path):
    tokenizer = AutoTokenizer.from_pretrained(tiny_path)
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    text = render_prompt_text(tokenizer, messages)
    assert (
        text
        == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n"
    )
    ids = render_prompt_ids(tokenizer, {"messages": messages})  # env observations are accepted too
    assert ids == tokenizer(text)["input_ids"]


def test_fallback_template_for_tokenizers_without_one(tiny_path):
    tokenizer = AutoTokenizer.from_pretrained(tiny_path)
    tokenizer.chat_template = None
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    assert render_prompt_text(tokenizer, messages) == "System: S\nUser: U\nAssistant:"
    assert (
        render_prompt_ids(tokenizer, messages)
        == tokenizer("System: S\nUser: U\nAssistant:")["input_ids"]
    )
    assert "Assistant" in FALLBACK_CHAT_TEMPLATE


WEATHER = {"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}


def test_tools_are_rendered_by_a_template_with_tool_support(tiny_path):
    tokenizer = AutoTokenizer.from_pretrained(tiny_path)
    tokenizer.chat_template = TOOL_TEMPLATE
    call = {"id": "c0", "type": "function", "function": {"name": "weather", "arguments": {}}}
    messages = [
        {"role": "user", "content": "Oslo?"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "content": "sunny", "tool_call_id": "c0"},
    ]
    text = render_prompt_text(tokenizer, {"messages": messages, "tools": [WEATHER]})
    assert text.startswith('<|im_start|>system\nTools:{"name": "weather"')  # (trim_blocks)
    assert '<tool_call>{"name": "weather", "arguments": {}}</tool_call>' in text
    assert "<|im_start|>tool\nsunny" in text
    # Without tools the same template renders the messages alone.
    plain = render_prompt_text(tokenizer, {"messages": messages[:1]})
    assert plain == "<|im_start|>user\nOslo?<|im_end|>\n<|im_start|>assistant\n"
    ids = render_prompt_ids(tokenizer, {"messages": messages, "tools": [WEATHER]})
    assert ids == tokenizer(text)["input_ids"]


def test_a_template_without_tool_support_refuses_tools_by_name(tiny_path):
    tokenizer = AutoTokenizer.from_pretrained(tiny_path)
    assert not supports_tools(tokenizer)
    observation = {"messages": [{"role": "user", "content": "Oslo?"}], "tools": [WEATHER]}
    with pytest.raises(ToolTemplateError, match=r"\['weather'\].*tool_prompt='hermes'"):
        render_prompt_ids(tokenizer, observation)
    tokenizer.chat_template = TOOL_TEMPLATE
    assert supports_tools(tokenizer)


def test_tiny_model_path_caches_by_settings(tmp_path, monkeypatch):
    monkeypatch.setenv("MARFT_CACHE", str(tmp_path))
    a = tiny_model_path(hidden_size=16, num_layers=1, num_heads=2)
    b = tiny_model_path(hidden_size=16, num_layers=1, num_heads=2)
    c = tiny_model_path(hidden_size=16, num_layers=1, num_heads=2, seed=3)
    assert a == b != c
    assert json.loads((a / "config.json").read_text())["hidden_size"] == 16
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".build-")]
