"""Counting a rendered prompt before generation: the context length comes from the model's
positions, and the character bound never refuses a prompt that fits."""

from __future__ import annotations

import types

import numpy as np
import pytest
from transformers import AutoTokenizer

from marft_algos.policy.prompt_length import PolicyMeter, context_length, longest_token_chars
from marft_algos.policy.rendering import render_prompt_ids


def test_the_context_is_the_models_positions_not_the_tokenizers_default():
    model = types.SimpleNamespace(config=types.SimpleNamespace(max_position_embeddings=1024))
    tokenizer = types.SimpleNamespace(model_max_length=4096)
    assert context_length(model, tokenizer) == 1024  # marft-tiny-math's case
    gpt2 = types.SimpleNamespace(config=types.SimpleNamespace(n_positions=1024))
    assert context_length(gpt2) == 1024
    bare = types.SimpleNamespace(config=types.SimpleNamespace())
    assert context_length(bare, tokenizer) == 4096
    assert context_length(bare, types.SimpleNamespace(model_max_length=int(1e30))) is None


@pytest.fixture(scope="module")
def meter(tiny_path):
    tokenizer = AutoTokenizer.from_pretrained(tiny_path)
    policy = types.SimpleNamespace(
        tokenizer=lambda agent: tokenizer,
        backbone=lambda agent: types.SimpleNamespace(model=None),
    )
    return PolicyMeter(policy), tokenizer


def test_a_prompt_is_counted_exactly_or_refused_by_its_characters(meter):
    meter, tokenizer = meter
    rng = np.random.default_rng(0)
    paths = {"counted": 0, "refused by characters": 0}
    alphabet = [*"ab 1\n\u00e9\u4e2d\U0001f600", "word ", "    ", "\\boxed{"]
    for _ in range(30):
        text = "".join(rng.choice(alphabet, size=int(rng.integers(1, 400))))
        messages = [{"role": "user", "content": text}]
        exact = len(render_prompt_ids(tokenizer, messages))
        # Under any limit the count is exact, or a true lower bound above the limit.
        for limit in (1, exact // 3, exact - 1, exact, exact + 5):
            tokens, ids = meter.measure("agent", messages, limit)
            if ids is not None:
                assert tokens == exact and ids == render_prompt_ids(tokenizer, messages)
                paths["counted"] += 1
            else:
                assert limit < tokens <= exact
                paths["refused by characters"] += 1
    assert min(paths.values()) > 0, paths
    assert meter.context_length("agent") == 4096  # the tokenizer's, with no model config
    assert longest_token_chars(tokenizer) >= len("<|im_start|>")
